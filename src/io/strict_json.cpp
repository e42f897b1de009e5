#include "io/strict_json.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "io/printable.h"

namespace tessera {

nlohmann::json parse_strict_json(std::string_view text, const std::string& where, int max_depth) {
  using nlohmann::json;
  // keys[d]: the keys seen so far in the open object at depth d (the callback reports an
  // object's start at its own depth and its keys at depth + 1).
  std::vector<std::unordered_set<std::string>> keys;
  const json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) {
      if (depth >= max_depth)
        throw JsonSyntaxError(where, "nested deeper than " + std::to_string(max_depth) + " levels");
      if (event == json::parse_event_t::object_start) {
        if (keys.size() <= static_cast<size_t>(depth)) keys.resize(static_cast<size_t>(depth) + 1);
        keys[static_cast<size_t>(depth)].clear();
      }
    } else if (event == json::parse_event_t::key && depth >= 1) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!keys[static_cast<size_t>(depth) - 1].insert(key).second)
        throw JsonSyntaxError(where, "duplicate key \"" + printable(key) + "\"");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, ..." -> "parse error at line 1, ..."
    std::string detail = e.what();
    if (const size_t p = detail.find("] ");
        detail.rfind("[json.exception.", 0) == 0 && p != std::string::npos)
      detail.erase(0, p + 2);
    throw JsonSyntaxError(where, detail);
  }
}

}  // namespace tessera
