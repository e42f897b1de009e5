#include "run_settings.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "default_model.h"
#include "method_flags.h"
#include "tessera/error.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace {
// Keys that describe a run but are not flags: read by people, skipped by --from-png.
const std::set<std::string> kNotFlags = {"drafter", "tessera"};
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

std::vector<std::string> settings_to_args(const std::string& png_path) {
  int w = 0, h = 0;
  std::vector<std::pair<std::string, std::string>> text;
  read_png(png_path, w, h, &text);
  const std::pair<std::string, std::string>* params = nullptr;
  for (const auto& t : text)
    if (t.first == "parameters") params = &t;
  if (!params) throw Error("--from-png " + png_path + ": no 'parameters' text chunk");
  std::vector<std::string> args;
  const auto items = parse_settings(params->second, "--from-png " + png_path);
  // A prompt is matched again (to the same class), so the class is not given beside it.
  const bool has_prompt =
      std::any_of(items.begin(), items.end(), [](const auto& kv) { return kv.first == "prompt"; });
  for (const auto& [k, v] : items) {
    if (has_prompt && k == "class") continue;
    if (k == "tessera" && v != kVersion)
      log_info("note: " + png_path + " was made by tessera " + v + ", this is " + kVersion +
               "; the image may differ");
    if (kNotFlags.count(k) || v == "default") continue;
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
  // Jacobi drafts recorded before a model could name its draft: keep them Jacobi drafts.
  const auto value_of = [&](const std::string& key) {
    for (const auto& [k, v] : items)
      if (k == key) return v;
    return std::string();
  };
  if (value_of("drafter") == "jacobi" && value_of("draft").empty() &&
      uses_draft_model(value_of("method"))) {
    args.push_back("--draft");
    args.push_back(kNoDraft);
  }
  if (args.empty()) throw Error("--from-png " + png_path + ": no settings in its parameters");
  return args;
}

}  // namespace tessera::cli
