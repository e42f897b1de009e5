// JSON read from files (config.json, classes.json, safetensors headers): nlohmann's parser, plus
// the checks it does not make. It keeps the last of duplicate keys silently (a file with two
// "dim" keys or two tensors of one name would be read as one of them), and it nests without
// limit.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "tessera/error.h"

namespace tessera {

// what(): "WHERE: invalid JSON (DETAIL)"; detail() alone, for callers that word it their way.
class JsonSyntaxError : public Error {
 public:
  JsonSyntaxError(const std::string& where, const std::string& detail)
      : Error(where + ": invalid JSON (" + detail + ")"), detail_(detail) {}
  const std::string& detail() const { return detail_; }

 private:
  std::string detail_;
};

// Parses `text` as one JSON document. Throws JsonSyntaxError on a syntax error, a duplicate key
// in any object, or nesting deeper than max_depth.
nlohmann::json parse_strict_json(std::string_view text, const std::string& where,
                                 int max_depth = 64);

}  // namespace tessera
