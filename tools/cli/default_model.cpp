#include "default_model.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "common.h"
#include "tessera/config.h"
#include "tessera/error.h"
#include "tessera/methods.h"

#ifndef TESSERA_SOURCE_DIR
#define TESSERA_SOURCE_DIR "."
#endif

namespace tessera::cli {

namespace fs = std::filesystem;

std::string default_model_dir() {
  if (const char* env = std::getenv("TESSERA_DEFAULT_MODEL"); env && *env) {
    if (!fs::exists(fs::path(env) / "config.json"))
      throw Error(std::string("TESSERA_DEFAULT_MODEL=") + env + " has no config.json");
    return env;
  }
  std::vector<fs::path> candidates;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    candidates.push_back(exe.parent_path() / ".." / "models" / "emoji" / "target");
    candidates.push_back(exe.parent_path() / ".." / "share" / "tessera" / "models" / "emoji" /
                         "target");
  }
  candidates.push_back(fs::path(TESSERA_SOURCE_DIR) / "models" / "emoji" / "target");
  std::string looked;
  for (const auto& c : candidates) {
    if (fs::exists(c / "config.json")) return fs::weakly_canonical(c).string();
    looked += (looked.empty() ? "" : ", ") + fs::weakly_canonical(c).string();
  }
  throw Error("no default model found (looked in " + looked +
              "); give -m DIR or set TESSERA_DEFAULT_MODEL");
}

DrafterChoice choose_drafter(const std::string& model_dir, const std::vector<std::string>& methods,
                             const std::string& draft_flag) {
  std::vector<const MethodInfo*> drafting;
  for (const std::string& name : methods)
    if (const MethodInfo* m = find_method(name); m && m->drafts != DraftSource::None)
      drafting.push_back(m);
  DrafterChoice c;
  if (drafting.empty()) return c;
  const bool model_drafts = std::any_of(drafting.begin(), drafting.end(), [](const MethodInfo* m) {
    return m->drafts == DraftSource::DraftModel || m->drafts == DraftSource::ModelOrJacobi;
  });
  if (!model_drafts) {  // sjd: the target drafts for itself
    if (!draft_flag.empty() && draft_flag != kNoDraft)
      throw Error("--draft: " + drafting.front()->name +
                  " drafts by Jacobi iteration (the target drafts for itself); drop --draft, or "
                  "use a method that drafts with a model (sd, lantern, ...)");
    return {"jacobi", "", "the method drafts by Jacobi iteration"};
  }
  const auto needs_model = std::find_if(drafting.begin(), drafting.end(), [](const MethodInfo* m) {
    return m->drafts == DraftSource::DraftModel;
  });
  if (draft_flag == kNoDraft) {
    if (needs_model != drafting.end())
      throw Error("--draft none: " + (*needs_model)->name +
                  " needs a draft model (for drafts without one, use sjd)");
    return {"jacobi", "", "--draft none: the target drafts for itself"};
  }
  if (!draft_flag.empty()) {
    check_model_dir(draft_flag, "--draft " + draft_flag);
    return {"model", draft_flag, "--draft"};
  }
  const ModelConfig mc = load_model_config(model_dir);
  const std::string config = (fs::path(model_dir) / "config.json").string();
  if (!mc.companions.draft.empty()) {
    const std::string dir = mc.companion_path(mc.companions.draft);
    check_model_dir(dir, config + " names the draft " + mc.companions.draft + " (" + dir + ")");
    return {"model", dir, "named in " + config};
  }
  if (needs_model != drafting.end())
    throw Error((*needs_model)->name + " needs a draft model: give --draft DIR (" + config +
                " names none; for drafts without a model, use sjd)");
  return {"jacobi", "",
          "no --draft given and " + config + " names no draft: the target drafts for itself"};
}

std::string prompt_file_name(const std::string& label) {
  std::string out;
  for (unsigned char c : label) {
    if (std::isalnum(c)) {
      out += static_cast<char>(std::tolower(c));
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return (out.empty() ? "image" : out) + ".png";
}

}  // namespace tessera::cli
