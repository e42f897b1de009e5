// tessera classes: the class names a model knows (classes.json), filtered by words and style.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace {

struct ClassesArgs {
  CommonOpts common;
  std::vector<std::string> filter;  // words, joined (unquoted words are one filter)
  std::string style;
};

int run_classes(ClassesArgs& a) {
  if (a.common.model.empty()) a.common.model = default_model_dir();
  apply_common(a.common);
  const ClassNames names = model_class_names(a.common.model);
  std::string filter;
  for (const auto& w : a.filter) filter += (filter.empty() ? "" : " ") + w;
  // The emoji itself ("🍎"), else names with words starting with the filter's ("straw").
  std::vector<int> ids = names.find_emoji(filter, a.style);
  if (ids.empty()) ids = names.find_words(filter, a.style, /*word_starts=*/true);
  for (int i : ids) {
    const ClassName& c = names.classes()[i];
    std::printf("%6d  %-40s %-9s %-17s %s%s\n", i, c.name.c_str(), c.style.c_str(),
                c.category.c_str(), c.emoji.c_str(), c.held_out ? "  (held out of training)" : "");
  }
  log_info(std::to_string(ids.size()) + " of " + std::to_string(names.classes().size()) +
           " classes");
  return 0;
}

}  // namespace

Command add_classes(CLI::App& app) {
  auto a = std::make_shared<ClassesArgs>();
  auto* c = app.add_subcommand("classes",
                               "List a model's class names (default: the embedded emoji model)");
  add_common(c, a->common, /*model_required=*/false);
  c->add_option("filter", a->filter,
                "Only names with words starting with these (\"straw\" finds strawberry), or the "
                "emoji itself (\"🍎\")")
      ->expected(0, -1);
  c->add_option("--style", a->style, "Only this style");
  return {c, [a] { return run_classes(*a); }};
}

}  // namespace tessera::cli
