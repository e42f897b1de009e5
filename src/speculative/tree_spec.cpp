#include "speculative/tree_spec.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string_view>

#include "tessera/error.h"

namespace tessera::speculative {

namespace {
constexpr std::string_view kDynamic = "dynamic";

// Candidates of a dynamic tree down to depth d: top_k at depth 1, top_k^2 at each deeper one
// (the frontier's top_k nodes, top_k children each), saturated at INT32_MAX.
int64_t candidates(int top_k, int d) {
  if (d <= 0) return 0;
  const int64_t k = top_k;
  return std::min<int64_t>(k + (d - 1) * k * k, INT32_MAX);
}

bool parse_int(std::string_view text, int lo, int hi, int& value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return false;
  value = v;
  return true;
}
}  // namespace

int DynamicTree::max_nodes(int d) const {
  return static_cast<int>(std::min<int64_t>(total, candidates(top_k, std::min(d, max_depth()))));
}

bool is_dynamic_tree_spec(const std::string& spec) {
  const std::string_view s = spec;
  return s == kDynamic || s.starts_with("dynamic:");
}

DynamicTree parse_dynamic_tree(const std::string& spec) {
  DynamicTree t;
  t.name = spec;
  const std::string_view s = spec;
  if (s == kDynamic) return t;
  check(s.starts_with("dynamic:"),
        [&] { return "tree '" + spec + "': expected dynamic or dynamic:DEPTH,TOPK,TOTAL"; });
  const std::string_view arg = s.substr(kDynamic.size() + 1);
  std::string_view item[3];
  size_t start = 0;
  for (int k = 0; k < 3; ++k) {
    const size_t comma = arg.find(',', start);
    check(k == 2 ? comma == std::string_view::npos : comma != std::string_view::npos, [&] {
      return "tree '" + spec + "': expected dynamic:DEPTH,TOPK,TOTAL (three integers)";
    });
    item[k] = arg.substr(start, k == 2 ? std::string_view::npos : comma - start);
    start = comma + 1;
  }
  check(parse_int(item[0], 0, kMaxTreeDepth - 1, t.depth), [&] {
    return "tree '" + spec + "': DEPTH (expansions after the root's) must be an integer in 0.." +
           std::to_string(kMaxTreeDepth - 1) + " ('" + std::string(item[0]) + "' is not)";
  });
  check(parse_int(item[1], 1, kMaxTreeNodes, t.top_k), [&] {
    return "tree '" + spec + "': TOPK must be an integer in 1.." + std::to_string(kMaxTreeNodes) +
           " ('" + std::string(item[1]) + "' is not)";
  });
  check(parse_int(item[2], 1, kMaxTreeNodes, t.total), [&] {
    return "tree '" + spec + "': TOTAL (drafted nodes kept) must be an integer in 1.." +
           std::to_string(kMaxTreeNodes) + " ('" + std::string(item[2]) + "' is not)";
  });
  const int64_t c = candidates(t.top_k, t.max_depth());
  check(t.total <= c, [&] {
    return "tree '" + spec + "': TOTAL " + std::to_string(t.total) + " exceeds the " +
           std::to_string(c) + " candidates of DEPTH " + std::to_string(t.depth) + ", TOPK " +
           std::to_string(t.top_k);
  });
  return t;
}

int TreeSpec::max_depth() const {
  return dynamic() ? dynamic_tree()->max_depth() : shape()->max_depth();
}

TreeSpec load_tree_spec(const std::string& spec) {
  if (is_dynamic_tree_spec(spec)) return parse_dynamic_tree(spec);
  return load_tree_shape(spec);
}

}  // namespace tessera::speculative
