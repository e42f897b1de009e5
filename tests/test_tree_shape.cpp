// Static draft-tree shapes (speculative/tree_shape.h): EAGLE choices lists, the named trees of
// LANTERN's choices.py, chain:N / kary:..., JSON files, and every bad input's one-line error.
#include "speculative/tree_shape.h"
#include "speculative/tree_spec.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "tessera/error.h"

namespace tessera::speculative {
namespace {

using Choices = std::vector<std::vector<int>>;

// Every structural invariant a shape promises: parents first, level-major order, siblings adjacent
// in rank order 0..n-1, depth = parent's depth + 1, path() and choices() consistent.
void expect_consistent(const TreeShape& s) {
  ASSERT_EQ(s.rank.size(), s.parent.size());
  ASSERT_EQ(s.depth.size(), s.parent.size());
  std::vector<int> next_rank(s.nodes() + 1, 0);  // index nodes() = the root
  for (int i = 0; i < s.nodes(); ++i) {
    const int p = s.parent[i];
    ASSERT_GE(p, -1);
    ASSERT_LT(p, i) << "node " << i << " precedes its parent";
    EXPECT_EQ(s.depth[i], p < 0 ? 1 : s.depth[p] + 1) << "node " << i;
    if (i > 0) {
      EXPECT_LE(s.depth[i - 1], s.depth[i]) << "not level-major at node " << i;
    }
    int& expected = next_rank[p < 0 ? s.nodes() : p];
    EXPECT_EQ(s.rank[i], expected) << "node " << i << ": siblings out of rank order";
    ++expected;
    const std::vector<int> path = s.path(i);
    ASSERT_EQ(static_cast<int>(path.size()), s.depth[i]);
    EXPECT_EQ(path.back(), s.rank[i]);
    if (p >= 0) {
      EXPECT_EQ(std::vector<int>(path.begin(), path.end() - 1), s.path(p));
    }
  }
  EXPECT_EQ(next_rank, s.child_counts());
  // A round trip through the choices list gives the same shape.
  const TreeShape again = tree_shape_from_choices(s.choices(), s.name);
  EXPECT_EQ(again.parent, s.parent);
  EXPECT_EQ(again.rank, s.rank);
  EXPECT_EQ(again.depth, s.depth);
}

std::vector<int> nodes_per_depth(const TreeShape& s) {
  std::vector<int> n(s.max_depth(), 0);
  for (int d : s.depth) ++n[d - 1];
  return n;
}

// The message of the tessera::Error `f` throws ("" when it does not).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("tessera_tree_shape_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string path = temp_path(name);
  std::ofstream(path) << text;
  return path;
}

TEST(TreeShape, FromChoicesOrdersLikeEagle) {
  // Out of order on input; EAGLE sorts by (length, path).
  const TreeShape s = tree_shape_from_choices({{0, 1}, {1}, {0}, {0, 0}, {1, 0}}, "t");
  EXPECT_EQ(s.name, "t");
  EXPECT_EQ(s.nodes(), 5);
  EXPECT_EQ(s.max_depth(), 2);
  EXPECT_EQ(s.parent, (std::vector<int>{-1, -1, 0, 0, 1}));
  EXPECT_EQ(s.rank, (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(s.depth, (std::vector<int>{1, 1, 2, 2, 2}));
  EXPECT_EQ(s.choices(), (Choices{{0}, {1}, {0, 0}, {0, 1}, {1, 0}}));
  EXPECT_EQ(s.child_counts(), (std::vector<int>{2, 1, 0, 0, 0, 2}));
  EXPECT_FALSE(s.is_chain());
  expect_consistent(s);
}

TEST(TreeShape, NaiveExtend57) {
  const TreeShape s = load_tree_shape("naive_extend_57");
  EXPECT_EQ(s.name, "naive_extend_57");
  EXPECT_EQ(s.nodes(), 57);
  EXPECT_EQ(s.max_depth(), 5);
  EXPECT_EQ(nodes_per_depth(s), (std::vector<int>{5, 13, 16, 14, 9}));
  expect_consistent(s);
  // Children per node as the notes list them (relaxed_sd.md §2): the root has 5, [0] has 4, ...
  const auto counts = s.child_counts();
  auto children_of = [&](const std::vector<int>& path) {
    for (int i = 0; i < s.nodes(); ++i)
      if (s.path(i) == path) return counts[i];
    return -1;
  };
  EXPECT_EQ(counts[s.nodes()], 5);
  const std::vector<std::pair<std::vector<int>, int>> expected = {
      {{0}, 4},          {{1}, 3},          {{2}, 3},          {{3}, 2},         {{4}, 1},
      {{0, 0}, 4},       {{0, 1}, 3},       {{0, 2}, 3},       {{0, 3}, 2},      {{1, 0}, 2},
      {{1, 1}, 1},       {{2, 0}, 1},       {{0, 0, 0}, 4},    {{0, 0, 1}, 3},   {{0, 0, 2}, 2},
      {{0, 0, 3}, 1},    {{0, 1, 0}, 2},    {{0, 1, 1}, 1},    {{0, 2, 0}, 1},   {{0, 0, 0, 0}, 3},
      {{0, 0, 0, 1}, 2}, {{0, 0, 1, 0}, 2}, {{0, 0, 1, 1}, 1}, {{0, 0, 2, 0}, 1}};
  int listed = 0;
  for (const auto& [path, n] : expected) {
    EXPECT_EQ(children_of(path), n) << "children of node " << ::testing::PrintToString(path);
    listed += n;
  }
  EXPECT_EQ(listed + 5, 57);  // every other node is a leaf
}

TEST(TreeShape, McSim7b63IsEagleOnesTwentyFiveNodeTree) {
  // EAGLE-1's mc_sim_7b_63 (SafeAILab/EAGLE eagle/model/choices.py, LANTERN's choices.py) has 25
  // nodes; the name is inherited from Medusa's 63-node tree.
  const TreeShape s = load_tree_shape("mc_sim_7b_63");
  EXPECT_EQ(s.nodes(), 25);
  EXPECT_EQ(s.max_depth(), 5);
  EXPECT_EQ(nodes_per_depth(s), (std::vector<int>{4, 8, 8, 3, 2}));
  expect_consistent(s);
}

TEST(TreeShape, Medusa27b63) {
  const TreeShape s = load_tree_shape("medusa_2_7b_63");
  EXPECT_EQ(s.nodes(), 63);
  EXPECT_EQ(s.max_depth(), 4);
  EXPECT_EQ(nodes_per_depth(s), (std::vector<int>{10, 23, 23, 7}));
  expect_consistent(s);
}

TEST(TreeShape, ChainRoundTrip) {
  for (int n : {1, 2, 5, 64}) {
    const TreeShape s = load_tree_shape("chain:" + std::to_string(n));
    EXPECT_EQ(s.name, "chain:" + std::to_string(n));
    EXPECT_EQ(s.nodes(), n);
    EXPECT_EQ(s.max_depth(), n);
    EXPECT_TRUE(s.is_chain()) << n;
    expect_consistent(s);
    // The same chain written as a choices list, and as kary:1,1,...
    Choices c;
    for (int d = 1; d <= n; ++d) c.emplace_back(d, 0);
    EXPECT_EQ(s.choices(), c);
    EXPECT_TRUE(tree_shape_from_choices(c, "c").is_chain());
    std::string kary = "kary:1";
    for (int d = 1; d < n; ++d) kary += ",1";
    const TreeShape k = load_tree_shape(kary);
    EXPECT_TRUE(k.is_chain());
    EXPECT_EQ(k.parent, s.parent);
  }
  EXPECT_FALSE(load_tree_shape("kary:2").is_chain());
  EXPECT_FALSE(load_tree_shape("kary:1,2").is_chain());
  EXPECT_FALSE(load_tree_shape("mc_sim_7b_63").is_chain());
}

TEST(TreeShape, Kary) {
  const TreeShape s = load_tree_shape("kary:3,2,1");
  EXPECT_EQ(s.nodes(), 3 + 6 + 6);
  EXPECT_EQ(nodes_per_depth(s), (std::vector<int>{3, 6, 6}));
  const auto counts = s.child_counts();
  for (int i = 0; i < s.nodes(); ++i)
    EXPECT_EQ(counts[i], s.depth[i] == 1 ? 2 : s.depth[i] == 2 ? 1 : 0);
  EXPECT_EQ(counts[s.nodes()], 3);
  expect_consistent(s);
  EXPECT_EQ(load_tree_shape("kary:8,63").nodes(), 8 + 8 * 63);  // 512: the largest allowed
}

TEST(TreeShape, BadChoicesNameTheProblemAndThePath) {
  auto err = [](const Choices& c) {
    return error_of([&] { tree_shape_from_choices(c, "t.json"); });
  };
  EXPECT_EQ(err({}), "t.json: empty tree (no paths)");
  EXPECT_EQ(err({{0}, {}}), "t.json: path 1 is empty ([])");
  EXPECT_EQ(err({{0}, {0, -1}}), "t.json: path [0,-1] has a negative rank");
  EXPECT_EQ(err({{0}, {1}, {0}}), "t.json: path [0] appears twice (entries 0 and 2)");
  EXPECT_EQ(err({{0}, {1, 0}}), "t.json: path [1,0] has no parent [1] (not a tree)");
  EXPECT_EQ(err({{0}, {0, 0, 0}}), "t.json: path [0,0,0] has no parent [0,0] (not a tree)");
  EXPECT_EQ(err({{0}, {2}, {1, 0}, {1}}), "");  // [1] is present: fine
  EXPECT_EQ(err({{0}, {2}}),
            "t.json: path [2] has no elder sibling [1] (the children of a node must have ranks "
            "0..n-1)");
  Choices deep;
  for (int d = 1; d <= 65; ++d) deep.emplace_back(d, 0);
  EXPECT_EQ(err(deep), "t.json: path [0,0,0,0,0,0,...,0,0,0,0] is 65 deep, more than 64");
  Choices wide;
  for (int r = 0; r < 513; ++r) wide.push_back({r});
  EXPECT_EQ(err(wide), "t.json: 513 nodes, more than 512");
  wide.pop_back();
  EXPECT_EQ(tree_shape_from_choices(wide, "w").nodes(), 512);
  deep.pop_back();
  EXPECT_EQ(tree_shape_from_choices(deep, "d").max_depth(), 64);
}

TEST(TreeShape, BadSpecs) {
  auto err = [](const std::string& spec) { return error_of([&] { load_tree_shape(spec); }); };
  EXPECT_EQ(err("chain:0"), "tree 'chain:0': the chain length must be an integer in 1..64");
  EXPECT_EQ(err("chain:65"), "tree 'chain:65': the chain length must be an integer in 1..64");
  EXPECT_EQ(err("chain:x"), "tree 'chain:x': the chain length must be an integer in 1..64");
  EXPECT_EQ(err("chain:"), "tree 'chain:': the chain length must be an integer in 1..64");
  EXPECT_EQ(err("kary:2,0"),
            "tree 'kary:2,0': each branching factor must be an integer in 1..512 ('0' is not)");
  EXPECT_EQ(err("kary:2,,3"),
            "tree 'kary:2,,3': each branching factor must be an integer in 1..512 ('' is not)");
  EXPECT_EQ(err("kary:8,8,8"), "tree 'kary:8,8,8': more than 512 nodes");
  EXPECT_EQ(err("kary:2,2,2,2,2,2,2,2,2,2"),
            "tree 'kary:2,2,2,2,2,2,2,2,2,2': more than 512 nodes");
  EXPECT_EQ(err("nosuchtree"),
            "tree 'nosuchtree': not a known tree (chain:N, kary:B1,B2,..., naive_extend_57, "
            "mc_sim_7b_63, medusa_2_7b_63) nor an existing file");
  EXPECT_EQ(err(""),
            "tree: empty spec (expected chain:N, kary:B1,B2,..., naive_extend_57, mc_sim_7b_63, "
            "medusa_2_7b_63 or a file)");
  const std::string missing = "/nonexistent/tree.json";
  EXPECT_EQ(err(missing).rfind(missing + ": ", 0), 0u) << err(missing);
}

TEST(TreeShape, JsonFile) {
  const std::string path = write_file("good.json", "[[0], [1], [0, 0], [0, 1], [1, 0]]\n");
  const TreeShape s = load_tree_shape(path);
  EXPECT_EQ(s.name, path);
  EXPECT_EQ(s.nodes(), 5);
  EXPECT_EQ(s.choices(), (Choices{{0}, {1}, {0, 0}, {0, 1}, {1, 0}}));
  expect_consistent(s);
  // The named tree written out and read back.
  const TreeShape named = load_tree_shape("naive_extend_57");
  std::string text = "[";
  for (const auto& p : named.choices()) {
    text += text.size() > 1 ? ",[" : "[";
    for (size_t i = 0; i < p.size(); ++i) {
      if (i) text += ",";
      text += std::to_string(p[i]);
    }
    text += "]";
  }
  const std::string named_path = write_file("named.json", text + "]");
  const TreeShape back = load_tree_shape(named_path);
  std::filesystem::remove(named_path);
  EXPECT_EQ(back.parent, named.parent);
  EXPECT_EQ(back.rank, named.rank);
  std::filesystem::remove(path);
}

TEST(TreeShape, BadJsonFilesNameTheFileAndTheProblem) {
  // The message for a file NAME holding TEXT, with the file's path written as "FILE".
  auto err = [](const std::string& name, const std::string& text) {
    const std::string p = write_file(name, text);
    std::string e = error_of([&] { load_tree_shape(p); });
    std::filesystem::remove(p);
    if (e.rfind(p, 0) == 0) e = "FILE" + e.substr(p.size());
    return e;
  };
  EXPECT_EQ(err("empty.json", " \n"),
            "FILE: empty file (expected a JSON list of paths such as [[0],[1],[0,0]])");
  EXPECT_EQ(err("syntax.json", "[[0], [1").rfind("FILE: invalid JSON (", 0), 0u);
  EXPECT_EQ(err("object.json", "{\"choices\": [[0]]}"),
            "FILE: not a tree (expected a JSON list of paths such as [[0],[1],[0,0]])");
  EXPECT_EQ(err("noarray.json", "[[0], 1]"),
            "FILE: entry 1 is not a path (a list of integer child ranks such as [0,1])");
  EXPECT_EQ(err("float.json", "[[0], [0.5]]"),
            "FILE: entry 1 is not a path (a list of integer child ranks such as [0,1])");
  EXPECT_EQ(err("huge.json", "[[0], [0, 99999999999]]"),
            "FILE: entry 1 is not a path (a list of integer child ranks such as [0,1])");
  EXPECT_EQ(err("emptylist.json", "[]"), "FILE: empty tree (no paths)");
  EXPECT_EQ(err("nottree.json", "[[0], [1, 0]]"),
            "FILE: path [1,0] has no parent [1] (not a tree)");
  EXPECT_EQ(err("dup.json", "[[0], [0]]"), "FILE: path [0] appears twice (entries 0 and 1)");
  std::string deep = "[";
  for (int d = 1; d <= 65; ++d) {
    deep += d > 1 ? ",[" : "[";
    for (int i = 0; i < d; ++i) deep += i ? ",0" : "0";
    deep += "]";
  }
  EXPECT_EQ(err("deep.json", deep + "]"),
            "FILE: path [0,0,0,0,0,0,...,0,0,0,0] is 65 deep, more than 64");
  std::string wide = "[[0]";
  for (int r = 1; r < 600; ++r) wide += ",[" + std::to_string(r) + "]";
  EXPECT_EQ(err("wide.json", wide + "]"), "FILE: 600 nodes, more than 512");
}

// --tree dynamic: LANTERN's EAGLE-2 defaults, sizes and the static/dynamic choice.
TEST(TreeSpec, DynamicDefaultsAndSizes) {
  const TreeSpec def = load_tree_spec("dynamic");
  ASSERT_TRUE(def.dynamic());
  const DynamicTree& d = *def.dynamic_tree();
  EXPECT_EQ(d.depth, 4);
  EXPECT_EQ(d.top_k, 10);
  EXPECT_EQ(d.total, 58);
  EXPECT_EQ(def.max_depth(), 5);
  EXPECT_EQ(d.max_nodes(1), 10);  // the root's top-k
  EXPECT_EQ(d.max_nodes(5), 58);  // TOTAL
  EXPECT_EQ(d.max_nodes(0), 0);
  const DynamicTree s = parse_dynamic_tree("dynamic:2,3,10");
  EXPECT_EQ(s.max_depth(), 3);
  EXPECT_EQ(s.max_nodes(2), 10);  // min(3 + 9, 10)
  EXPECT_EQ(parse_dynamic_tree("dynamic:1,3,5").max_nodes(1), 3);
  EXPECT_EQ(parse_dynamic_tree("dynamic:0,4,4").max_depth(), 1);
  const TreeSpec st = load_tree_spec("mc_sim_7b_63");
  ASSERT_FALSE(st.dynamic());
  EXPECT_EQ(st.shape()->nodes(), 25);
  for (const char* bad :
       {"dynamic:", "dynamic:1,2", "dynamic:1,2,3,4", "dynamic:-1,2,2", "dynamic:1,0,1",
        "dynamic:1,2,0", "dynamic:1,2,7", "dynamic:1, 2,3", "dynamic:64,1,1", "dynamicx"})
    EXPECT_THROW(load_tree_spec(bad), Error) << bad;
}

}  // namespace
}  // namespace tessera::speculative
