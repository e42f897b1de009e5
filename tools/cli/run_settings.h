// The settings of a generation, complete and in one place: the line printed at the start of a
// run, the "parameters" stored in every image, the "settings" of --stats-out and what
// `generate --from-png` reads back all come from one RunSettings, so they cannot disagree.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

// The version written into every output and compared by --from-png.
inline constexpr const char* kVersion = "0.1.0";

struct RunSettings {
  // In order; keys are the flags' long names without "--" ("seed", "cfg-interval") or method
  // parameter names ("lantern.k"), except the informational keys of kNotFlags.
  std::vector<std::pair<std::string, std::string>> items;

  void add(const std::string& key, const std::string& value) { items.emplace_back(key, value); }
  // "key=value; key=value" with '\' and ';' escaped by '\' (a path may hold them).
  std::string text() const;
  nlohmann::json json() const;
};

// A float as the shortest text that reads back as the same float ("1", "0.95", "4.0999999").
std::string exact(float v);

// Parses RunSettings::text() back (unescaping); throws an Error naming `source` on a malformed one.
std::vector<std::pair<std::string, std::string>> parse_settings(const std::string& text,
                                                                const std::string& source);

// What an image tessera wrote says about the run that made it (--from-png): one image's settings,
// or a grid sheet's, whose images differ only in their index.
struct StoredRun {
  std::vector<std::pair<std::string, std::string>> items;  // one image's (a sheet's first)
  int images = 1;                                          // a sheet's images
  std::string value(const std::string& key) const;         // "" when absent
};
// Reads it from a PNG, JPEG or WebP file (read_image_parameters); an Error naming the file when
// it holds none or they do not parse, or a sheet's images are not one run.
StoredRun read_stored_run(const std::string& path);

// The command-line words that reproduce a stored run: "--seed 42", ... (a sheet: -n N --grid).
// Informational keys are skipped, and so are the model and its draft ("model", "draft"), which the
// caller resolves to directories; a setting left at its default ("default") gives no flag.
std::vector<std::string> settings_to_args(const StoredRun& run, const std::string& source);

}  // namespace tessera::cli
