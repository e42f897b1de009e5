#include "default_model.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
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

namespace {
// What a companion drafter named by MethodInfo::drafter is, for messages.
std::string companion_title(const std::string& drafter) {
  return drafter == "eagle"    ? "EAGLE drafter"
         : drafter == "medusa" ? "Medusa heads"
         : drafter == "hawk"   ? "Hawk heads"
                               : drafter;
}
}  // namespace

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
                  "with a draft model use --method sd (or lantern, ...)");
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
  // Methods drafted by one companion other than the draft alone (eagle; medusa, medusa-typical):
  // that companion.
  const std::string& first = drafting.front()->drafter;
  const bool companion_only =
      first != "draft" && std::all_of(drafting.begin(), drafting.end(),
                                      [&](const MethodInfo* m) { return m->drafter == first; });
  if (companion_only)
    return {"model", method_draft_dir(model_dir, drafting.front()->name, "", c),
            "the " + companion_title(first) + " named in " + config};
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

std::string method_draft_dir(const std::string& model_dir, const std::string& method,
                             const std::string& draft_flag, const DrafterChoice& run) {
  const MethodInfo* m = find_method(method);
  if (!draft_flag.empty() || !m || m->drafter == "draft") return run.dir;
  const ModelConfig mc = load_model_config(model_dir);
  const std::string config = (fs::path(model_dir) / "config.json").string();
  const bool eagle = m->drafter == "eagle", hawk = m->drafter == "hawk";
  const std::string& named = eagle  ? mc.companions.eagle
                             : hawk ? mc.companions.hawk
                                    : mc.companions.medusa;
  const std::string title = companion_title(m->drafter);
  if (named.empty())
    throw Error(method + " drafts with " + (eagle ? "an " : "") + title + ": give --draft DIR (" +
                config + " names no \"" + m->drafter + "\" companion; " +
                (eagle  ? "tools/convert_eagle.py"
                 : hawk ? "python/emoji/train_medusa.py --vertical D"
                        : "python/emoji/train_medusa.py") +
                " makes one)");
  const std::string dir = mc.companion_path(named);
  check_model_dir(dir, config + " names the " + title + " " + named + " (" + dir + ")");
  return dir;
}

std::string model_name(const std::string& dir) {
  const fs::path p = fs::weakly_canonical(fs::absolute(dir));
  const std::string parent = p.parent_path().filename().string();
  return parent.empty() ? p.filename().string() : parent + "/" + p.filename().string();
}

std::string model_hash(const std::string& dir) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a 64
  auto mix = [&h](const char* data, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<unsigned char>(data[i]);
      h *= 1099511628211ull;
    }
  };
  auto mix_file_part = [&](std::ifstream& in, uint64_t offset, size_t n) {
    std::string buf(n, '\0');
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(buf.data(), static_cast<std::streamsize>(n));
    mix(buf.data(), static_cast<size_t>(in.gcount()));
    in.clear();
  };
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file(ec) &&
        (e.path().filename() == "config.json" || e.path().extension() == ".safetensors"))
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& f : files) {
    const std::string name = f.filename().string();
    mix(name.data(), name.size());
    const uint64_t size = fs::file_size(f, ec);
    mix(reinterpret_cast<const char*>(&size), sizeof size);
    std::ifstream in(f, std::ios::binary);
    if (name == "config.json") {
      mix_file_part(in, 0, 1 << 20);
      continue;
    }
    mix_file_part(in, 0, 64 << 10);  // the safetensors header: names, shapes, offsets
    constexpr int kBlocks = 64;
    constexpr size_t kBlock = 4096;
    for (int b = 0; b < kBlocks && size > kBlock; ++b)
      mix_file_part(in, (size - kBlock) * b / (kBlocks - 1), kBlock);
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
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

std::map<std::string, std::string> serving_methods(const std::string& model_dir,
                                                   const std::string& methods,
                                                   const GenerateOptions& gen,
                                                   const std::string& draft_flag, Pipeline& pipe,
                                                   const std::string& flag) {
  const bool all = methods == "all";
  std::vector<std::string> names;
  if (all) {
    for (const MethodInfo& m : registered_methods())
      if (m.tokens != TokenKind::Continuous) names.push_back(m.name);
  } else {
    names = split_list(methods);
    for (const std::string& m : names) {
      const MethodInfo* info = find_method(m);
      if (!info || info->tokens == TokenKind::Continuous)
        throw Error(flag + ": " + m +
                    " is not a LlamaGen method (tessera generate --help lists them)");
    }
  }
  const std::string own = gen.spec.method;
  if (std::find(names.begin(), names.end(), own) == names.end()) names.push_back(own);
  std::map<std::string, std::string> out;
  for (const std::string& m : names) {
    try {
      const std::string draft = m == own ? draft_flag : "";
      GenerateOptions g = gen;
      g.spec = m == own ? gen.spec : SpeculativeOptions{};
      g.spec.method = m;
      g.spec.draft_model =
          method_draft_dir(model_dir, m, draft, choose_drafter(model_dir, {m}, draft));
      pipe.validate(g);
      out[m] = g.spec.draft_model;
    } catch (const Error& e) {
      if (!all || m == own) throw;
      if (verbose()) log_info("serve: method " + m + " is not served: " + e.what());
    }
  }
  return out;
}

}  // namespace tessera::cli
