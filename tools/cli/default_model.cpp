#include "default_model.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "tessera/error.h"

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

std::string sibling_draft_dir(const std::string& target_dir) {
  const fs::path d = fs::path(target_dir).parent_path() / "draft";
  return fs::exists(d / "config.json") ? d.string() : "";
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
