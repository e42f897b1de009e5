// What `--tree` names: a static shape (tree_shape.h, EAGLE-1) or a dynamic tree (EAGLE-2,
// arXiv:2406.16858 §4; its code `topK_genrate`): a drafter expands the most confident nodes by
// their cumulative draft log-probability and keeps the best `total` of them, so the tree's shape
// changes every round (see ModelDrafter::propose_dynamic).
#pragma once

#include <string>
#include <variant>

#include "speculative/tree_shape.h"

namespace tessera::speculative {

// EAGLE-2's dynamic tree: the root's top_k children, then `depth` expansions, each feeding the
// top_k frontier nodes and scoring their top_k children by cumulative log q; of all candidates
// the `total` best by score are drafted. The defaults are LANTERN's for LlamaGen
// (EaModel.from_pretrained: depth 4, top_k 10, total_token 59 = the root plus 58 drafts).
struct DynamicTree {
  int depth = 4;   // expansions after the root's (draft forwards beyond the catch-up)
  int top_k = 10;  // children per expanded node, and the frontier's size
  int total = 58;  // drafted nodes kept (the root, the last committed token, not counted)
  std::string name;
  int max_depth() const { return depth + 1; }  // the deepest draft
  // Candidates down to depth d (top_k at depth 1, top_k^2 at each deeper one), capped by total.
  int max_nodes(int d) const;
};

// "dynamic" (the defaults) or "dynamic:DEPTH,TOPK,TOTAL"; checks 0 <= DEPTH < kMaxTreeDepth,
// 1 <= TOPK, TOTAL <= kMaxTreeNodes and TOTAL <= the candidates the tree can have. Throws
// tessera::Error with one line naming the spec and the problem.
DynamicTree parse_dynamic_tree(const std::string& spec);
bool is_dynamic_tree_spec(const std::string& spec);  // "dynamic" or "dynamic:..."

// A parsed --tree: static or dynamic.
struct TreeSpec {
  std::variant<TreeShape, DynamicTree> tree;
  TreeSpec(TreeShape s) : tree(std::move(s)) {}    // NOLINT: a static shape is a spec
  TreeSpec(DynamicTree d) : tree(std::move(d)) {}  // NOLINT
  bool dynamic() const { return std::holds_alternative<DynamicTree>(tree); }
  const TreeShape* shape() const { return std::get_if<TreeShape>(&tree); }
  const DynamicTree* dynamic_tree() const { return std::get_if<DynamicTree>(&tree); }
  int max_depth() const;
};

// The dynamic specs, else load_tree_shape's.
TreeSpec load_tree_spec(const std::string& spec);

}  // namespace tessera::speculative
