#include "speculative/tree_shape.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "io/regular_file.h"
#include "io/strict_json.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {

// The static trees of LANTERN's models/drafters/choices.py (jadohu/LANTERN 3a56e45; the same
// lists are in the LANTERN-derived HyattDD/VVS and selinyldrm/Deepseek-JanusPro-EAGLE, read at
// dfcae9f and 39010c0), transcribed as data. mc_sim_7b_63 is also SafeAILab/EAGLE's
// eagle/model/choices.py (08dc06c): EAGLE-1's default, 25 nodes. The "63" in its name comes from
// Medusa's tree of that name (63 nodes), which EAGLE replaced by this smaller one.
// One line per depth, as in choices.py.
// clang-format off
const std::vector<std::vector<int>> kNaiveExtend57 = {
    {0}, {1}, {2}, {3}, {4},
    {0,0}, {0,1}, {0,2}, {0,3}, {1,0}, {1,1}, {1,2}, {2,0}, {2,1}, {2,2}, {3,0}, {3,1}, {4,0},
    {0,0,0}, {0,0,1}, {0,0,2}, {0,0,3}, {0,1,0}, {0,1,1}, {0,1,2}, {0,2,0}, {0,2,1}, {0,2,2},
        {0,3,0}, {0,3,1}, {1,0,0}, {1,0,1}, {1,1,0}, {2,0,0},
    {0,0,0,0}, {0,0,0,1}, {0,0,0,2}, {0,0,0,3}, {0,0,1,0}, {0,0,1,1}, {0,0,1,2}, {0,0,2,0},
        {0,0,2,1}, {0,0,3,0}, {0,1,0,0}, {0,1,0,1}, {0,1,1,0}, {0,2,0,0},
    {0,0,0,0,0}, {0,0,0,0,1}, {0,0,0,0,2}, {0,0,0,1,0}, {0,0,0,1,1}, {0,0,1,0,0}, {0,0,1,0,1},
        {0,0,1,1,0}, {0,0,2,0,0}};

const std::vector<std::vector<int>> kMcSim7b63 = {
    {0}, {1}, {2}, {3},
    {0,0}, {0,1}, {0,2}, {1,0}, {1,1}, {2,0}, {2,1}, {3,0},
    {0,0,0}, {0,0,1}, {0,0,2}, {0,1,0}, {0,1,1}, {0,2,0}, {0,2,1}, {1,0,0},
    {0,0,0,0}, {0,0,0,1}, {0,0,0,2},
    {0,0,0,0,0}, {0,0,0,0,1}};

const std::vector<std::vector<int>> kMedusa27b63 = {
    {0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9},
    {0,0}, {0,1}, {0,2}, {0,3}, {0,4}, {0,5}, {0,6}, {0,7}, {0,8}, {0,9}, {1,0}, {1,1}, {1,2},
        {1,3}, {1,4}, {2,0}, {2,1}, {3,0}, {3,1}, {4,0}, {5,0}, {6,0}, {7,0},
    {0,0,0}, {0,0,1}, {0,0,2}, {0,0,3}, {0,0,4}, {0,0,5}, {0,0,6}, {0,0,7}, {0,0,8}, {0,1,0},
        {0,1,1}, {0,1,2}, {0,1,3}, {0,2,0}, {0,2,1}, {0,3,0}, {0,4,0}, {0,5,0},
        {1,0,0}, {1,0,1}, {1,0,2}, {1,1,0}, {2,0,0},
    {0,0,0,0}, {0,0,0,1}, {0,0,0,2}, {0,0,0,3}, {0,0,1,0}, {0,0,2,0}, {0,1,0,0}};
// clang-format on

struct NamedTree {
  const char* name;
  const std::vector<std::vector<int>>* choices;
};
const NamedTree kNamedTrees[] = {{"naive_extend_57", &kNaiveExtend57},
                                 {"mc_sim_7b_63", &kMcSim7b63},
                                 {"medusa_2_7b_63", &kMedusa27b63}};

// "[0,1,2]"; a very deep path is shortened in the middle so the message stays one short line.
std::string path_text(const std::vector<int>& path) {
  std::string s = "[";
  const size_t n = path.size();
  for (size_t i = 0; i < n; ++i) {
    if (n > 12 && i == 6) {
      s += "...,";
      i = n - 4;
    }
    s += std::to_string(path[i]);
    if (i + 1 < n) s += ",";
  }
  return s + "]";
}

// Parses a whole decimal integer in [lo, hi]; false otherwise.
bool parse_int(std::string_view text, int lo, int hi, int& value) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < lo || v > hi) return false;
  value = v;
  return true;
}

std::string names_list() {
  std::string s = "chain:N, kary:B1,B2,...";
  for (const auto& t : kNamedTrees) s += std::string(", ") + t.name;
  return s;
}

TreeShape chain_shape(const std::string& spec, std::string_view arg) {
  int n = 0;
  check(parse_int(arg, 1, kMaxTreeDepth, n), [&] {
    return "tree '" + spec + "': the chain length must be an integer in 1.." +
           std::to_string(kMaxTreeDepth);
  });
  std::vector<std::vector<int>> choices;
  for (int d = 1; d <= n; ++d) choices.emplace_back(d, 0);
  return tree_shape_from_choices(choices, spec);
}

TreeShape kary_shape(const std::string& spec, std::string_view arg) {
  std::vector<int> branching;
  int64_t level = 1, total = 0;
  size_t start = 0;
  while (true) {
    const size_t comma = arg.find(',', start);
    const std::string_view item =
        arg.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    int b = 0;
    check(parse_int(item, 1, kMaxTreeNodes, b), [&] {
      return "tree '" + spec + "': each branching factor must be an integer in 1.." +
             std::to_string(kMaxTreeNodes) + " ('" + std::string(item) + "' is not)";
    });
    branching.push_back(b);
    check(static_cast<int>(branching.size()) <= kMaxTreeDepth, [&] {
      return "tree '" + spec + "': deeper than " + std::to_string(kMaxTreeDepth) + " levels";
    });
    level *= b;
    total += level;
    check(total <= kMaxTreeNodes, [&] {
      return "tree '" + spec + "': more than " + std::to_string(kMaxTreeNodes) + " nodes";
    });
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  // Level by level: every path of length d + 1 extends every path of length d.
  std::vector<std::vector<int>> choices, frontier = {{}};
  for (int b : branching) {
    std::vector<std::vector<int>> next;
    for (const auto& p : frontier)
      for (int r = 0; r < b; ++r) {
        next.push_back(p);
        next.back().push_back(r);
      }
    choices.insert(choices.end(), next.begin(), next.end());
    frontier = std::move(next);
  }
  return tree_shape_from_choices(choices, spec);
}

TreeShape file_shape(const std::string& path) {
  const std::string text = read_small_file(path, size_t{1} << 20);
  check(text.find_first_not_of(" \t\r\n") != std::string::npos, [&] {
    return path + ": empty file (expected a JSON list of paths such as [[0],[1],[0,0]])";
  });
  const nlohmann::json j = parse_strict_json(text, path);
  check(j.is_array(), [&] {
    return path + ": not a tree (expected a JSON list of paths such as [[0],[1],[0,0]])";
  });
  std::vector<std::vector<int>> choices;
  choices.reserve(j.size());
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    bool ok = e.is_array();
    std::vector<int> p;
    if (ok) {
      for (const auto& r : e) {
        if (!r.is_number_integer() || r.get<int64_t>() > INT_MAX || r.get<int64_t>() < INT_MIN) {
          ok = false;
          break;
        }
        p.push_back(static_cast<int>(r.get<int64_t>()));
      }
    }
    check(ok, [&] {
      return path + ": entry " + std::to_string(i) +
             " is not a path (a list of integer child ranks such as [0,1])";
    });
    choices.push_back(std::move(p));
  }
  return tree_shape_from_choices(choices, path);
}

}  // namespace

int TreeShape::max_depth() const {
  return depth.empty() ? 0 : *std::max_element(depth.begin(), depth.end());
}

bool TreeShape::is_chain() const {
  if (parent.empty()) return false;
  for (int i = 0; i < nodes(); ++i)
    if (parent[i] != i - 1 || rank[i] != 0) return false;
  return true;
}

std::vector<int> TreeShape::child_counts() const {
  std::vector<int> counts(nodes() + 1, 0);
  for (int p : parent) ++counts[p < 0 ? nodes() : p];
  return counts;
}

std::vector<int> TreeShape::path(int node) const {
  std::vector<int> p;
  for (int i = node; i >= 0; i = parent[i]) p.push_back(rank[i]);
  std::reverse(p.begin(), p.end());
  return p;
}

std::vector<std::vector<int>> TreeShape::choices() const {
  std::vector<std::vector<int>> c;
  c.reserve(nodes());
  for (int i = 0; i < nodes(); ++i) c.push_back(path(i));
  return c;
}

TreeShape tree_shape_from_choices(const std::vector<std::vector<int>>& choices, std::string name) {
  check(!choices.empty(), [&] { return name + ": empty tree (no paths)"; });
  check(static_cast<int>(choices.size()) <= kMaxTreeNodes, [&] {
    return name + ": " + std::to_string(choices.size()) + " nodes, more than " +
           std::to_string(kMaxTreeNodes);
  });
  std::map<std::vector<int>, int> index;  // path -> entry
  for (size_t i = 0; i < choices.size(); ++i) {
    const std::vector<int>& p = choices[i];
    check(!p.empty(), [&] { return name + ": path " + std::to_string(i) + " is empty ([])"; });
    check(static_cast<int>(p.size()) <= kMaxTreeDepth, [&] {
      return name + ": path " + path_text(p) + " is " + std::to_string(p.size()) +
             " deep, more than " + std::to_string(kMaxTreeDepth);
    });
    for (int r : p)
      check(r >= 0, [&] { return name + ": path " + path_text(p) + " has a negative rank"; });
    const auto [it, fresh] = index.emplace(p, static_cast<int>(i));
    check(fresh, [&] {
      return name + ": path " + path_text(p) + " appears twice (entries " +
             std::to_string(it->second) + " and " + std::to_string(i) + ")";
    });
  }
  for (const auto& [p, i] : index) {
    std::vector<int> q = p;
    if (p.size() > 1) {
      q.pop_back();
      check(index.count(q) > 0, [&] {
        return name + ": path " + path_text(p) + " has no parent " + path_text(q) + " (not a tree)";
      });
    }
    if (p.back() > 0) {
      q = p;
      --q.back();
      check(index.count(q) > 0, [&] {
        return name + ": path " + path_text(p) + " has no elder sibling " + path_text(q) +
               " (the children of a node must have ranks 0..n-1)";
      });
    }
  }
  // EAGLE's order: by length, then lexicographically (std::map orders lexicographically).
  std::vector<const std::vector<int>*> order;
  order.reserve(index.size());
  for (const auto& [p, i] : index) order.push_back(&p);
  std::stable_sort(order.begin(), order.end(),
                   [](const auto* a, const auto* b) { return a->size() < b->size(); });
  TreeShape s;
  s.name = std::move(name);
  std::map<std::vector<int>, int> node_of;
  for (const auto* p : order) {
    const int node = static_cast<int>(s.parent.size());
    int par = -1;
    if (p->size() > 1) par = node_of.at(std::vector<int>(p->begin(), p->end() - 1));
    s.parent.push_back(par);
    s.rank.push_back(p->back());
    s.depth.push_back(static_cast<int>(p->size()));
    node_of.emplace(*p, node);
  }
  return s;
}

const std::vector<std::string>& named_tree_shapes() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n = {"chain:N", "kary:B1,B2,..."};
    for (const auto& t : kNamedTrees) n.emplace_back(t.name);
    return n;
  }();
  return names;
}

TreeShape load_tree_shape(const std::string& spec) {
  check(!spec.empty(), [] { return "tree: empty spec (expected " + names_list() + " or a file)"; });
  const std::string_view s = spec;
  if (s.starts_with("chain:")) return chain_shape(spec, s.substr(6));
  if (s.starts_with("kary:")) return kary_shape(spec, s.substr(5));
  for (const auto& t : kNamedTrees)
    if (spec == t.name) return tree_shape_from_choices(*t.choices, spec);
  // A file; a bare word that names no file was probably meant as a tree's name.
  std::error_code ec;
  const bool missing = !std::filesystem::exists(spec, ec);
  check(!(missing && spec.find_first_of("/.") == std::string::npos), [&] {
    return "tree '" + spec + "': not a known tree (" + names_list() + ") nor an existing file";
  });
  return file_shape(spec);
}

}  // namespace tessera::speculative
