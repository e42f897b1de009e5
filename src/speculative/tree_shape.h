// Static draft-tree shapes: which nodes a drafter expands, and which child of its parent each node
// is. A shape holds no tokens; a drafter fills it every round (EAGLE-1's static trees, LANTERN++'s
// `--static_tree`). Shapes come from EAGLE's `choices` lists (every node written as the path of
// child ranks from the root: [[0],[1],[0,0]] is two children of the root and one grandchild under
// the first), from a few named generators, or from a JSON file holding such a list.
#pragma once

#include <string>
#include <vector>

namespace tessera::speculative {

// The largest tree any spec may describe: deeper or larger trees are refused with an error.
inline constexpr int kMaxTreeDepth = 64;
inline constexpr int kMaxTreeNodes = 512;

struct TreeShape {
  std::string name;
  // Nodes in topological order (parents first), level by level, then by parent, then by rank: the
  // order of EAGLE's generate_tree_buffers (choices sorted by (length, path)), so siblings are
  // adjacent and in rank order.
  std::vector<int> parent;  // index of the parent node; -1 = a child of the root
  // The child's index among its siblings: the top-k rank of its token in the parent's draft
  // distribution (greedy) or the order in which it was sampled without replacement (sampling), as
  // EAGLE-1 uses it. The ranks of one node's children are 0..n-1 (no gaps).
  std::vector<int> rank;
  std::vector<int> depth;  // 1 = a child of the root (the first drafted token)

  int nodes() const { return static_cast<int>(parent.size()); }
  int max_depth() const;
  // One child per node: node i is the only child of node i-1 (a chain of nodes() drafts).
  bool is_chain() const;
  // Number of children of each node (index nodes() stands for the root).
  std::vector<int> child_counts() const;
  // The path of child ranks from the root to node i (EAGLE's choices entry).
  std::vector<int> path(int node) const;
  // The shape as EAGLE's choices list, in node order.
  std::vector<std::vector<int>> choices() const;
};

// The shape of an EAGLE choices list (each entry one node, as the ranks along its path from the
// root). Validates that the list describes a tree: not empty, every path non-empty with ranks
// >= 0, no path twice, every path's parent present, the ranks of a node's children without gaps,
// depth <= kMaxTreeDepth and at most kMaxTreeNodes nodes. Throws tessera::Error with one line
// "NAME: PROBLEM" naming the offending path ("tree.json: path [1,0] has no parent [1] (not a
// tree)").
TreeShape tree_shape_from_choices(const std::vector<std::vector<int>>& choices, std::string name);

// A tree from a spec:
//   chain:N               N drafts in a chain (1 <= N <= kMaxTreeDepth)
//   kary:B1,B2,...,BD     B1 children of the root, B2 children of each of those, ... (Bi >= 1)
//   naive_extend_57       LANTERN++'s default static tree (57 nodes, depth 5)
//   mc_sim_7b_63          EAGLE-1's default static tree (25 nodes despite its name, depth 5)
//   medusa_2_7b_63        the Medusa-2 tree in LANTERN's choices.py (63 nodes, depth 4)
//   PATH                  a JSON file holding a choices list, e.g. [[0],[1],[0,0]]
// Throws tessera::Error with one line naming the spec or the file and the problem.
TreeShape load_tree_shape(const std::string& spec);

// The names load_tree_shape knows, for help texts and errors.
const std::vector<std::string>& named_tree_shapes();

}  // namespace tessera::speculative
