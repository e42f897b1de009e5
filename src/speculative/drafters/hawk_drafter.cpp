#include "speculative/drafters/hawk_drafter.h"

#include <algorithm>
#include <numeric>

#include "tessera/error.h"

namespace tessera::speculative {

std::string hawk_default_tree(const HawkOptions& o) {
  const int slots = std::max(1, o.samples * (o.vertical + (o.horizontal > 0 ? 1 : 0)));
  const int depth = o.horizontal > 0 ? o.horizontal : 4;
  std::string spec = "kary:";
  for (int d = 0; d < std::max(depth, 1); ++d) {
    if (d > 0) spec += ',';
    spec += std::to_string(slots);
  }
  return spec;
}

HawkDrafter::HawkDrafter(const MedusaHeads& heads, const SamplingParams& params,
                         HawkOptions options, TreeShape shape, int n_tokens)
    : heads_(heads),
      params_(params),
      opt_(options),
      shape_(std::move(shape)),
      n_tokens_(n_tokens),
      // Feature rows of one forward: a round's committed rows (at most the tree's depth + 1) of
      // one image, both halves.
      ws_(heads.make_workspace(2 * (shape_.max_depth() + 1))),
      features_(heads.backend(), heads.dim(), params.uses_cfg(), 1),
      rows_(heads.backend(), heads.vocab_size(), "hawk") {
  check(opt_.horizontal >= 0 && opt_.horizontal <= heads.num_heads() && opt_.vertical >= 0 &&
            opt_.vertical <= heads.vertical_heads() && opt_.horizontal + opt_.vertical > 0 &&
            opt_.samples >= 1,
        "internal: Hawk drafts with " + std::to_string(opt_.horizontal) + " horizontal and " +
            std::to_string(opt_.vertical) + " vertical heads of " +
            std::to_string(heads.num_heads()) + " and " + std::to_string(heads.vertical_heads()));
  check(opt_.vertical == 0 || heads.config().row_width >= 1,
        "internal: vertical heads without a row width");
}

int HawkDrafter::draft_depth(int draft_len) const {
  return std::max(0, std::min(draft_len, shape_.max_depth()));
}

int HawkDrafter::max_nodes(int draft_len) const {
  const int depth = draft_depth(draft_len);
  return static_cast<int>(
      std::count_if(shape_.depth.begin(), shape_.depth.end(), [&](int d) { return d <= depth; }));
}

void HawkDrafter::copy_rows_in(const Tensor& t, std::span<const int> rows, int64_t at) {
  check(t.data && t.dtype == DType::F32 && t.dim(1) == heads_.dim(),
        "internal: the Hawk drafter needs the target's post-norm hidden states");
  for (size_t i = 0; i < rows.size(); ++i) {
    check(rows[i] >= 0 && rows[i] < t.dim(0),
          "internal: a hidden-state row outside the target's outputs");
    Tensor to = ws_.features.rows(at + static_cast<int64_t>(i), 1);
    heads_.backend().copy(t.rows(rows[i], 1), to);
  }
}

template <class TokenOf>
void HawkDrafter::head_distributions(int rows, int first, int count, TokenOf token,
                                     const SamplingParams& p) {
  const bool cfg = params_.uses_cfg();
  const Tensor logits = heads_.forward(ws_, cfg ? 2 * rows : rows, first, count);
  forwards_++;
  settings_.resize(static_cast<size_t>(count) * rows);
  for (int k = 0; k < count; ++k)
    for (int r = 0; r < rows; ++r)
      settings_[static_cast<size_t>(k) * rows + r] =
          device_sample_params(p, 0, 0, static_cast<uint32_t>(token(r, k)));
  rows_.compute(logits, rows, count, cfg, settings_);
  dists_ = rows_.read();
}

void HawkDrafter::start(std::span<ImageState* const> images, const TargetPrefill& prefill) {
  // The prefill's last prefix row of each slot predicted the image's first token (the first
  // root): the horizontal heads' input for round 1, and the vertical heads' proposals for the
  // tokens d rows below token 0.
  const int n = static_cast<int>(images.size()), rows = prefill.rows;
  const int W = heads_.config().row_width, V = heads_.vocab_size();
  for (int i = 0; i < n; ++i) {
    const int id = images[i]->id;
    State& s = state_.try_emplace(id, State{{std::max(W, 1), opt_.vertical, V}}).first->second;
    s.cache.clear();
    features_.put(id, prefill.hidden, static_cast<int64_t>(i) * rows + rows - 1, &prefill.hidden,
                  static_cast<int64_t>(n + i) * rows + rows - 1);
    if (opt_.vertical == 0) continue;
    features_.gather(std::span(&id, 1), ws_.features);
    head_distributions(
        1, heads_.num_heads(), opt_.vertical, [&](int, int k) { return (k + 1) * W; },
        images[i]->sampling);
    for (int k = 0; k < opt_.vertical; ++k)
      s.cache.put(0, k + 1, dists_.subspan(static_cast<size_t>(k) * V, V), n_tokens_);
  }
}

void HawkDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                          std::vector<DraftTree>& trees) {
  check_images_sampling(active, params_);
  trees.assign(active.size(), {});
  const int V = heads_.vocab_size();
  std::vector<int> node_of(shape_.nodes());
  std::vector<std::vector<std::span<const float>>> slots;
  std::vector<std::vector<int32_t>> tokens;
  std::vector<std::vector<int>> verticals;  // per depth: the vertical slots' head depths
  for (size_t j = 0; j < active.size(); ++j) {
    ImageState& im = *active[j];
    const int depth = std::min(max_depth[j], draft_depth(max_depth[j]));
    if (depth <= 0) continue;
    State& s = state_.at(im.id);
    const int t = static_cast<int>(im.tokens.size()) - 1;  // the root's token index
    // HorizSpec (Eq. 4): the horizontal heads on the root's predicting row, depth k + 1's q.
    const int H = std::min(opt_.horizontal, depth);
    if (H > 0) {
      features_.gather(std::span(&im.id, 1), ws_.features);
      head_distributions(
          1, 0, H, [&](int, int k) { return t + 1 + k; }, im.sampling);
      im.stats.draft_forwards++;
    }
    // Eq. 5's pool per depth: the cached vertical proposals, nearest row first, then the
    // horizontal one; each member `samples` times, each slot one draw from its q.
    slots.assign(depth, {});
    tokens.assign(depth, {});
    verticals.assign(depth, {});
    for (int d = 1; d <= depth && t + d < n_tokens_; ++d) {
      const int P = t + d;
      std::vector<std::span<const float>>& pool = slots[d - 1];
      for (const SpeculationCache::Entry& e : s.cache.pool(P))
        if (e.depth <= opt_.vertical)
          for (int a = 0; a < opt_.samples; ++a) {
            pool.push_back(e.q);
            verticals[d - 1].push_back(e.depth);
          }
      if (d <= H)
        for (int a = 0; a < opt_.samples; ++a)
          pool.push_back(dists_.subspan(static_cast<size_t>(d - 1) * V, V));
      if (!opt_.top) {
        for (size_t k = 0; k < pool.size(); ++k)
          tokens[d - 1].push_back(sample_index(
              pool[k], im.rng.uniform(P, stream_id(Stream::Draft, im.round, static_cast<int>(k)))));
        continue;
      }
      // Deterministic candidates: each member's next most likely token not yet in the pool
      // (a repeat would be rejected for sure once its twin is), verified as one-hot drafts.
      std::vector<std::span<const float>> kept;
      std::vector<int> kept_vertical;
      for (size_t k = 0; k < pool.size(); ++k) {
        const std::span<const float> q = pool[k];
        int best = -1;
        for (int y = 0; y < V; ++y) {
          if (q[y] <= 0.0f ||
              std::find(tokens[d - 1].begin(), tokens[d - 1].end(), y) != tokens[d - 1].end())
            continue;
          if (best < 0 || q[y] > q[best]) best = y;
        }
        if (best < 0) continue;
        tokens[d - 1].push_back(best);
        kept.push_back(q);
        kept_vertical.push_back(k < verticals[d - 1].size() ? verticals[d - 1][k] : 0);
      }
      pool = std::move(kept);
      verticals[d - 1] = std::move(kept_vertical);
    }
    // The Cartesian product of the pools, cut to the static shape over slots.
    DraftTree& tree = trees[j];
    for (int u = 0; u < shape_.nodes(); ++u) {
      node_of[u] = -1;
      const int d = shape_.depth[u], p = shape_.parent[u], r = shape_.rank[u];
      if (d > depth || (p >= 0 && node_of[p] < 0)) continue;
      if (r >= static_cast<int>(slots[d - 1].size())) continue;
      DraftNode node;
      node.parent = p < 0 ? -1 : node_of[p];
      node.depth = d;
      node.token = tokens[d - 1][r];
      if (!opt_.top) {
        node.q.assign(slots[d - 1][r].begin(), slots[d - 1][r].end());
        node.with_replacement = true;  // tested against its own q (Eq. 6)
      }  // top: one-hot q (empty), accepted with p(x) and removed from p when rejected
      if (r < static_cast<int>(verticals[d - 1].size())) node.vertical = verticals[d - 1][r];
      // The node's value (EAGLE-2's path confidence): the product along its path of each slot's
      // confidence, q(x) for a top candidate and E_{x~q} q(x) = Σ q² for a sampled one, read
      // from q and never from the draw, so that the budget below keeps the walk exact.
      const std::span<const float> q = slots[d - 1][r];
      double confidence = 0.0;
      if (opt_.top)
        confidence = q[node.token];
      else
        for (float v : q) confidence += static_cast<double>(v) * v;
      node.value = confidence * (node.parent < 0 ? 1.0 : tree[node.parent].value);
      node_of[u] = static_cast<int>(tree.size());
      tree.push_back(std::move(node));
    }
    if (budget_ && tree.size() > 1) keep_best(im, tree);
  }
}

void HawkDrafter::keep_best(const ImageState& im, DraftTree& tree) {
  // Best first; a child's value is at most its parent's and ties go to the earlier node, so any
  // prefix of this order holds every kept node's parent.
  std::vector<int> order(tree.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return tree[a].value > tree[b].value; });
  std::vector<double> values(order.size());
  for (size_t k = 0; k < order.size(); ++k) values[k] = tree[order[k]].value;
  const int n = std::clamp(budget_(im, values), 1, static_cast<int>(tree.size()));
  std::vector<char> kept(tree.size(), 0);
  for (int k = 0; k < n; ++k) kept[order[k]] = 1;
  // The kept nodes in their tree order (pools stay vertical first), parents re-indexed.
  std::vector<int> index(tree.size(), -1);
  DraftTree out;
  for (size_t u = 0; u < tree.size(); ++u) {
    if (!kept[u]) continue;
    DraftNode node = std::move(tree[u]);
    check(node.parent < 0 || index[node.parent] >= 0,
          "internal: Hawk kept a node without its parent");
    node.parent = node.parent < 0 ? -1 : index[node.parent];
    index[u] = static_cast<int>(out.size());
    out.push_back(std::move(node));
  }
  tree = std::move(out);
}

void HawkDrafter::finish_round(ImageState& image, const DraftTree&, const VerifyOutcome& outcome,
                               const TargetRound& target) {
  // The rows that predicted this round's committed tokens: the root's (row 0) and every accepted
  // node's; the last of them predicted the next root.
  std::vector<int> rows = {0};
  for (int a : outcome.accepted) rows.push_back(a + 1);
  const int k = static_cast<int>(rows.size());
  const int first = static_cast<int>(image.tokens.size()) - k;  // the token row 0 predicted
  State& s = state_.at(image.id);
  // The last row is the next round's horizontal input; all of them, moved where the heads read
  // them, are the vertical heads' (never through the host).
  features_.put(image.id, target.hidden, rows.back(), &target.hidden_uncond, rows.back());
  const int V = heads_.vocab_size();
  // The next round drafts from token image.tokens.size() on: earlier proposals are spent.
  s.cache.evict_before(static_cast<int>(image.tokens.size()));
  if (opt_.vertical == 0) return;
  const int W = heads_.config().row_width;
  copy_rows_in(target.hidden, rows, 0);
  if (params_.uses_cfg()) copy_rows_in(target.hidden_uncond, rows, k);
  head_distributions(
      k, heads_.num_heads(), opt_.vertical, [&](int r, int d) { return first + r + (d + 1) * W; },
      image.sampling);
  for (int d = 0; d < opt_.vertical; ++d)
    for (int r = 0; r < k; ++r)
      s.cache.put(first + r, d + 1, dists_.subspan((static_cast<size_t>(d) * k + r) * V, V),
                  n_tokens_);
}

}  // namespace tessera::speculative
