#include "run_settings.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "default_model.h"
#include "image_output.h"
#include "method_flags.h"
#include "tessera/error.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace {
// Keys that describe a run but are not flags: read by people, skipped by --from-png.
const std::set<std::string> kNotFlags = {"drafter", "tessera", "model_hash", "draft_hash"};
}  // namespace

std::string RunSettings::text() const {
  std::string s;
  for (const auto& [k, v] : items) {
    if (!s.empty()) s += "; ";
    s += k + "=";
    for (char c : v) {
      if (c == '\\' || c == ';') s += '\\';
      s += c;
    }
  }
  return s;
}

nlohmann::json RunSettings::json() const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : items) j[k] = v;
  return j;
}

std::string exact(float v) {
  char buf[32];
  for (int prec = 1; prec <= 9; ++prec) {  // 9 significant digits always read back exactly
    std::snprintf(buf, sizeof buf, "%.*g", prec, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

std::vector<std::pair<std::string, std::string>> parse_settings(const std::string& text,
                                                                const std::string& source) {
  std::vector<std::pair<std::string, std::string>> out;
  std::string key, value;
  bool in_value = false;
  auto finish = [&] {
    if (!in_value)
      throw Error(source + ": malformed parameters (expected key=value; ...): " + text);
    out.emplace_back(key, value);
    key.clear();
    value.clear();
    in_value = false;
  };
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (!in_value) {
      if (c == '=') {
        in_value = true;
      } else if (c == ' ' && key.empty()) {
      } else if (c == '\n' || c == ';') {
        throw Error(source + ": malformed parameters (expected key=value; ...): " + text);
      } else {
        key += c;
      }
    } else if (c == '\\' && i + 1 < text.size()) {
      value += text[++i];
    } else if (c == ';') {
      finish();
    } else if (c == '\n') {
      throw Error(source +
                  " holds the parameters of several images (a --grid sheet?); give the "
                  "PNG of one image");
    } else {
      value += c;
    }
  }
  if (!key.empty() || in_value) finish();
  return out;
}

std::string StoredRun::value(const std::string& key) const {
  for (const auto& [k, v] : items)
    if (k == key) return v;
  return "";
}

StoredRun read_stored_run(const std::string& path) {
  const std::string text = read_image_parameters(path);
  if (text.empty()) throw Error("--from-png " + path + ": no tessera settings in it");
  StoredRun run;
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end == std::string::npos ? end : end - start);
    if (!line.empty()) lines.push_back(line);
    if (end == std::string::npos) break;
    start = end + 1;
  }
  // A sheet holds one line per image: the same run, consecutive image indices.
  for (size_t i = 0; i < lines.size(); ++i) {
    auto items = parse_settings(lines[i], "--from-png " + path);
    auto without_index = items;
    std::erase_if(without_index, [](const auto& kv) { return kv.first == "image_index"; });
    if (i == 0) {
      run.items = items;
      continue;
    }
    auto first = run.items;
    std::erase_if(first, [](const auto& kv) { return kv.first == "image_index"; });
    const std::string want = std::to_string(std::stoull("0" + run.value("image_index")) + i);
    std::string index;
    for (const auto& [k, v] : items)
      if (k == "image_index") index = v;
    if (without_index != first || index != want)
      throw Error("--from-png " + path + ": a sheet whose images are not one run (image " +
                  std::to_string(i) + " differs from the first in more than its index)");
  }
  run.images = static_cast<int>(lines.size());
  return run;
}

std::vector<std::string> settings_to_args(const StoredRun& run, const std::string& source) {
  std::vector<std::string> args;
  const auto& items = run.items;
  // A prompt is matched again (to the same class), so the class is not given beside it.
  const bool has_prompt = !run.value("prompt").empty();
  for (const auto& [k, v] : items) {
    if (has_prompt && k == "class") continue;
    if (k == "tessera" && v != kVersion)
      log_info("note: " + source + " was made by tessera " + v + ", this is " + kVersion +
               "; the image may differ");
    if (kNotFlags.count(k) || v == "default") continue;
    if (k == "model" || (k == "draft" && v != kNoDraft)) continue;  // resolved by the caller
    std::string flag = "--" + k;
    for (char& c : flag)
      if (c == '.' || c == '_') c = '-';
    if (v == "true" && (k == "uncond" || k.find('.') != std::string::npos)) {
      args.push_back(flag);  // a switch
      continue;
    }
    args.push_back(flag);
    args.push_back(v);
  }
  // --draft-len auto's costs recorded before the hold was: those lengths were chosen every round.
  if (!run.value("draft_costs").empty() && run.value("draft_hold").empty()) {
    args.push_back("--draft-hold");
    args.push_back("1");
  }
  // Jacobi drafts recorded before a model could name its draft: keep them Jacobi drafts.
  if (run.value("drafter") == "jacobi" && run.value("draft").empty() &&
      uses_draft_model(run.value("method"))) {
    args.push_back("--draft");
    args.push_back(kNoDraft);
  }
  if (run.images > 1) {
    args.push_back("-n");
    args.push_back(std::to_string(run.images));
    args.push_back("--grid");
  }
  if (args.empty()) throw Error("--from-png " + source + ": no settings in its parameters");
  return args;
}

}  // namespace tessera::cli
