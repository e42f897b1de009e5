// Recording a validated setting in a model's config.json "quality" section (`tessera tune
// --write`, docs/quality.md). The reader is parse_model_config (model_config.cpp).
#include <filesystem>
#include <nlohmann/json.hpp>

#include "io/regular_file.h"
#include "io/strict_json.h"
#include "tessera/config.h"
#include "tessera/file_io.h"

namespace tessera {

namespace {

using ordered = nlohmann::ordered_json;

ordered interval(const RecordedInterval& r) {
  return {{"value", r.value}, {"lo", r.lo}, {"hi", r.hi}};
}

ordered param(const ParamValue& v) {
  return std::visit([](const auto& x) { return ordered(x); }, v);
}

}  // namespace

std::string with_validated_setting(std::string_view json_text, const std::string& dir,
                                   const std::string& method, const ValidatedSetting& s) {
  const std::string where = (std::filesystem::path(dir) / "config.json").string();
  parse_strict_json(json_text, where);  // syntax, duplicate keys, depth
  // ordered_json keeps the file's key order, so that the diff is the new entry only.
  ordered root = ordered::parse(json_text);
  if (!root.is_object()) throw Error(where + ": expected a JSON object");
  ordered& q = root["quality"];
  if (q.is_null()) q = ordered::object();
  if (!q.is_object()) throw Error(where + ": \"quality\" must be an object");
  if (!q.contains("tolerance")) {
    const QualityTolerance t;
    q["tolerance"] = {{"top1_drop_points", t.top1_drop_points},
                      {"frechet_over_floor", t.frechet_over_floor}};
  }
  ordered params = ordered::object();
  for (const auto& [name, value] : s.params) params[name] = param(value);
  const QualityMeasurement& m = s.measured;
  ordered entry = {{"params", params},
                   {"drafts", s.draft_model ? "model" : "jacobi"},
                   {"measured",
                    {{"images", m.images},
                     {"speedup", m.speedup},
                     {"mean_accepted_length", m.mean_accepted_length},
                     {"top1", interval(m.top1)},
                     {"frechet", interval(m.frechet)},
                     {"vanilla_top1", interval(m.vanilla_top1)},
                     {"frechet_floor", interval(m.frechet_floor)},
                     {"date", m.date},
                     {"tessera_version", m.tessera_version}}}};
  // The setting replaced goes to the front of the history (its own history after it).
  if (q.contains("methods") && q["methods"].is_object() && q["methods"].contains(method) &&
      q["methods"][method].is_object()) {
    ordered previous = q["methods"][method];
    ordered history = ordered::array();
    if (previous.contains("history") && previous["history"].is_array())
      history = previous["history"];
    previous.erase("history");
    history.insert(history.begin(), previous);
    entry["history"] = history;
  }
  q["methods"][method] = entry;
  std::string text = root.dump(2) + "\n";
  parse_model_config(text, dir);  // what is written must load
  return text;
}

void write_validated_setting(const std::string& dir, const std::string& method,
                             const ValidatedSetting& s) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  write_file_atomic(path,
                    with_validated_setting(read_small_file(path, size_t{1} << 20), dir, method, s));
}

}  // namespace tessera
