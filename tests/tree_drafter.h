// A drafter of static draft trees for the tests of tree verification in the speculative loop
// (test_spec_trees.cpp, test_tree_round.cpp): every node at depth d gets branching[d - 1]
// children (fewer where the image's end or the round's depth cuts the tree), nodes level-major
// (parents first, siblings together), as EAGLE's static trees are laid out. Children come from a
// distribution q(. | image tokens + path) that a function provides (a fixed q, or a model's), in
// one of three ways:
// - Iid: drawn i.i.d. from q (with replacement; duplicates possible), each node carrying q and
//   `with_replacement` (the walk tests it against q itself: SpecInfer's multi-step sampling);
// - WithoutReplacement: drawn one after another from q without the earlier siblings' tokens,
//   each node carrying q (the walk removes rejected tokens: recursive rejection sampling);
// - TopK: the k most likely tokens of q, distinct and deterministic, each with a one-hot q.
#pragma once

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"

namespace tessera::test {

enum class Children { Iid, WithoutReplacement, TopK };

class TreeDrafter : public speculative::Drafter {
 public:
  // q(image, prefix): the draft distribution after `prefix` (the image's tokens, then the path).
  using QFn = std::function<std::vector<float>(const ImageState&, const std::vector<int32_t>&)>;
  // Called at finish_round with the image, its tokens before the round, the tree, its outcome and
  // the target's outputs.
  using OnRound = std::function<void(
      const ImageState&, const std::vector<int32_t>& before, const speculative::DraftTree&,
      const speculative::VerifyOutcome&, const speculative::TargetRound&)>;

  TreeDrafter(std::vector<int> branching, Children children, QFn q)
      : branching_(std::move(branching)), children_(children), q_(std::move(q)) {}

  std::string name() const override { return "tree"; }
  int draft_depth(int) const override { return static_cast<int>(branching_.size()); }
  int max_nodes(int) const override {
    int nodes = 0, level = 1;
    for (int b : branching_) nodes += level *= b;
    return nodes;
  }
  void start(std::span<ImageState* const>, const speculative::TargetPrefill&) override {}
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    trees.resize(active.size());
    for (size_t j = 0; j < active.size(); ++j) {
      const ImageState& im = *active[j];
      speculative::DraftTree& tree = trees[j];
      tree.clear();
      const int depth = std::min(max_depth[j], static_cast<int>(branching_.size()));
      std::vector<int> level = {-1};  // the nodes of the current depth (-1: the root)
      for (int d = 1; d <= depth; ++d) {
        std::vector<int> next;
        for (int parent : level) {
          std::vector<int32_t> prefix = im.tokens;
          const size_t at = prefix.size();
          for (int a = parent; a >= 0; a = tree[a].parent)
            prefix.insert(prefix.begin() + at, tree[a].token);
          const std::vector<float> q = q_(im, prefix);
          add_children(im, d, parent, q, tree, next);
        }
        level.swap(next);
      }
    }
  }
  void finish_round(ImageState& image, const speculative::DraftTree& tree,
                    const speculative::VerifyOutcome& outcome,
                    const speculative::TargetRound& target) override {
    if (on_round) {
      // image.tokens holds this round's tokens: the accepted drafts and the next token.
      const size_t added = outcome.accepted.size() + 1;
      const std::vector<int32_t> before(image.tokens.begin(), image.tokens.end() - added);
      on_round(image, before, tree, outcome, target);
    }
  }
  void release(const ImageState&) override {}

  OnRound on_round;
  // false: i.i.d. children are not marked with_replacement (a deliberately wrong drafter: the
  // walk then removes rejected tokens from q as for draws without replacement).
  bool flag_replacement = true;

 private:
  void add_children(const ImageState& im, int depth, int parent, const std::vector<float>& q,
                    speculative::DraftTree& tree, std::vector<int>& next) const {
    const int k = branching_[depth - 1];
    const int token_index = static_cast<int>(im.tokens.size()) + depth - 1;
    auto node = [&](int32_t token) {
      speculative::DraftNode n;
      n.token = token;
      n.parent = parent;
      n.depth = depth;
      next.push_back(static_cast<int>(tree.size()));
      return n;
    };
    if (children_ == Children::TopK) {
      std::vector<int32_t> order(q.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return q[a] > q[b]; });
      for (int c = 0; c < k && c < static_cast<int>(order.size()); ++c)
        tree.push_back(node(order[c]));  // one-hot q (empty): a deterministic draft
      return;
    }
    std::vector<float> left = q;
    for (int c = 0; c < k; ++c) {
      // Each node's draws use their own uniform: (token index, Draft stream, round, node index).
      const double u =
          im.rng.uniform(token_index, speculative::stream_id(speculative::Stream::Draft, im.round,
                                                             static_cast<int>(tree.size())));
      double mass = 0.0;
      for (float v : left) mass += v;
      if (!(mass > 0.0)) return;  // fewer distinct tokens with mass than children
      std::vector<float> norm(left.size());
      for (size_t t = 0; t < left.size(); ++t) norm[t] = static_cast<float>(left[t] / mass);
      speculative::DraftNode n = node(sample_index(norm, u));
      n.q = q;
      n.with_replacement = children_ == Children::Iid && flag_replacement;
      if (children_ == Children::WithoutReplacement) left[n.token] = 0.0f;
      tree.push_back(std::move(n));
    }
  }

  std::vector<int> branching_;
  Children children_;
  QFn q_;
};

}  // namespace tessera::test
