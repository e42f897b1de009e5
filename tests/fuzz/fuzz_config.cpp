// A JSON document read as a model's config.json and as its classes.json (then prompt matching).
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "fuzz_targets.h"
#include "tessera/class_names.h"
#include "tessera/config.h"
#include "tessera/error.h"

namespace tessera::fuzz {

void config_input(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    parse_model_config(text, "fuzz");
  } catch (const Error&) {
  }
  // classes.json must list exactly the model's class count: take the count it lists, so that
  // inputs get past that check to the matching code.
  int n = 0;
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_object() && j.contains("classes") && j["classes"].is_array())
    n = static_cast<int>(j["classes"].size());
  try {
    const ClassNames names = ClassNames::parse(text, n, "fuzz/classes.json");
    for (const char* prompt : {"apple", "red apple", "grinning face", "smiling"}) {
      try {
        names.match(prompt);
      } catch (const Error&) {
      }
    }
    for (int i = 0; i < n; ++i) names.label(i);
  } catch (const Error&) {
  }
}

}  // namespace tessera::fuzz

TESSERA_FUZZ_ENTRY(tessera::fuzz::config_input)
