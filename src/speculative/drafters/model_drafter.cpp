#include "speculative/drafters/model_drafter.h"

#include <algorithm>

#include "decode/guidance.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {
// Shape nodes fed to the draft model at each depth: those with children (EAGLE-1 runs the drafter
// on the non-leaf nodes only), in shape order. fed[d - 1] lists the nodes of depth d.
std::vector<std::vector<int>> fed_per_depth(const TreeShape& shape) {
  std::vector<std::vector<int>> fed(shape.max_depth());
  const std::vector<int> counts = shape.child_counts();
  for (int u = 0; u < shape.nodes(); ++u)
    if (counts[u] > 0) fed[shape.depth[u] - 1].push_back(u);
  return fed;
}

SessionOptions draft_session(const SamplingParams& params, int max_depth, int max_images,
                             const std::optional<TreeShape>& shape) {
  SessionOptions o;
  o.n_slots = max_images * (params.uses_cfg() ? 2 : 1);
  o.extra_capacity = max_depth + 2;
  o.max_new = 2;  // the catch-up feeds at most the last two committed tokens
  if (shape) {
    // The fed nodes of every depth stay in the cache until the round's compaction.
    o.extra_capacity = shape->nodes() + 2;
    for (const auto& f : fed_per_depth(*shape))
      o.max_new = std::max(o.max_new, static_cast<int>(f.size()));
    o.max_outputs_per_seq = o.max_new;
  }
  return o;
}

// The images that draft this round (max_depth > 0), and the deepest draft among them.
std::vector<int> drafting(std::span<const int> max_depth, int& depth) {
  std::vector<int> who;
  depth = 0;
  for (size_t j = 0; j < max_depth.size(); ++j)
    if (max_depth[j] > 0) {
      who.push_back(static_cast<int>(j));
      depth = std::max(depth, max_depth[j]);
    }
  return who;
}
}  // namespace

ModelDrafter::ModelDrafter(const AutoregressiveModel& model, const SamplingParams& params,
                           int max_depth, int max_images, std::optional<TreeShape> shape)
    : model_(model),
      params_(params),
      session_(model, draft_session(params, max_depth, max_images, shape)),
      shape_(std::move(shape)) {
  if (shape_) {
    children_.assign(shape_->nodes() + 1, {});
    for (int u = 0; u < shape_->nodes(); ++u) {
      const int p = shape_->parent[u];
      children_[p < 0 ? shape_->nodes() : p].push_back(u);  // in rank order (shape order)
    }
  }
}

void ModelDrafter::finish_round(ImageState& image, const DraftTree&, const VerifyOutcome& outcome,
                                const TargetRound&) {
  if (!shape_) return;  // the chain: the next catch-up cuts the cache after the accepted drafts
  auto it = slots_.find(image.id);
  if (it == slots_.end() || it->second.tree_base < 0) return;
  Slots& s = it->second;
  // Keep the fed rows of the accepted path (a path from the root, so ascending positions); the
  // last accepted node may be a leaf, never fed, which the next catch-up feeds.
  std::vector<int> keep;
  for (int a : outcome.accepted) {
    if (a < 0 || a >= static_cast<int>(s.fed_at.size()) || s.fed_at[a] < 0) break;
    keep.push_back(s.fed_at[a]);
  }
  session_.compact(s.cond, s.tree_base, keep);
  if (s.uncond >= 0) session_.compact(s.uncond, s.tree_base, keep);
  s.tree_base = -1;
  s.fed_at.clear();
}

void ModelDrafter::start(std::span<ImageState* const> images) {
  const bool cfg = params_.uses_cfg();
  std::vector<const Condition*> conds;
  std::vector<int32_t> slots, uncond;
  for (ImageState* im : images) {
    Slots s;
    s.cond = session_.acquire_slot();
    if (cfg) s.uncond = session_.acquire_slot();
    slots_[im->id] = s;
    conds.push_back(&im->condition);
    slots.push_back(s.cond);
    uncond.push_back(s.uncond);
    im->stats.draft_forwards++;
  }
  if (cfg) slots.insert(slots.end(), uncond.begin(), uncond.end());
  session_.prefill(conds, cfg, slots);  // the prefix only; its logits are not needed
}

void ModelDrafter::release(const ImageState& image) {
  auto it = slots_.find(image.id);
  if (it == slots_.end()) return;
  session_.release_slot(it->second.cond);
  if (it->second.uncond >= 0) session_.release_slot(it->second.uncond);
  slots_.erase(it);
}

// Catch-up: the cache holds at least the committed tokens but the last two (see docs); cut it
// there (and drop the rows of a tree finish_round never compacted: they are no path) and fill `b`
// with the slots of the images `who` (cond, then uncond) and those tokens, so every image appends
// the same number of rows.
void ModelDrafter::catch_up(std::span<ImageState* const> active, const std::vector<int>& who,
                            StepBatch& b) {
  const int T = model_.info().prefix_len;
  const bool cfg = params_.uses_cfg();
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  b.slots.resize(R);
  for (int i = 0; i < m; ++i) {
    const Slots& s = slots_.at(active[who[i]]->id);
    b.slots[i] = s.cond;
    if (cfg) b.slots[m + i] = s.uncond;
  }
  int feed = 2;
  for (int j : who) feed = std::min(feed, static_cast<int>(active[j]->tokens.size()));
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    check(static_cast<int>(im.tokens.size()) >= feed, "internal: drafter catch-up");
    const int keep = T + static_cast<int>(im.tokens.size()) - feed;
    const Slots& s = slots_.at(im.id);
    for (int h = 0; h < (cfg ? 2 : 1); ++h) {
      const int slot = b.slots[h * m + i];
      if (s.tree_base >= 0) session_.remove(slot, std::min(s.tree_base, session_.length(slot)));
      check(session_.length(slot) >= keep, "internal: draft cache behind");
      session_.remove(slot, keep);
    }
  }
  b.n_new = feed;
  b.tokens.resize(static_cast<size_t>(R) * feed);
  b.positions.resize(b.tokens.size());
  for (int h = 0; h < (cfg ? 2 : 1); ++h)
    for (int i = 0; i < m; ++i) {
      const ImageState& im = *active[who[i]];
      const int nt = static_cast<int>(im.tokens.size());
      for (int f = 0; f < feed; ++f) {
        const size_t row = static_cast<size_t>(h * m + i) * feed + f;
        b.tokens[row] = im.tokens[nt - feed + f];
        b.positions[row] = model_.token_position(nt - feed + f);
      }
    }
}

void ModelDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                           std::vector<DraftTree>& trees) {
  if (shape_) {
    propose_tree(active, max_depth, trees);
    return;
  }
  const int V = model_.info().vocab_size;
  const bool cfg = params_.uses_cfg();
  trees.assign(active.size(), {});
  int depth = 0;
  const std::vector<int> who = drafting(max_depth, depth);
  if (who.empty()) return;
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  StepBatch b;
  catch_up(active, who, b);
  std::vector<int32_t> next(R);
  for (int step = 0; step < depth; ++step) {
    b.output_at = {b.n_new - 1};
    session_.read(session_.forward(b).logits, logits_);
    for (int i = 0; i < m; ++i) {
      ImageState& im = *active[who[i]];
      const int d = step + 1;  // depth of the node drawn now
      if (d > max_depth[who[i]]) {
        next[i] = 0;  // a filler row for an image whose draft is complete
        continue;
      }
      im.stats.draft_forwards++;
      const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of the node
      DraftNode node;
      node.parent = d - 2;
      node.depth = d;
      node.q.resize(V);
      guided_distribution(logits_.data() + static_cast<size_t>(i) * V,
                          cfg ? logits_.data() + static_cast<size_t>(m + i) * V : nullptr, V,
                          params_, t, node.q);
      node.token =
          params_.temperature <= 0.0f
              ? argmax(node.q)
              : sample_index(node.q, im.rng.uniform(t, stream_id(Stream::Draft, im.round)));
      next[i] = node.token;
      trees[who[i]].push_back(std::move(node));
    }
    if (step + 1 == depth) break;
    b.n_new = 1;
    b.tokens.assign(R, 0);
    for (int i = 0; i < m; ++i) {
      b.tokens[i] = next[i];
      if (cfg) b.tokens[m + i] = next[i];
    }
    b.positions.resize(R);
    for (int h = 0; h < (cfg ? 2 : 1); ++h)
      for (int i = 0; i < m; ++i) {
        const ImageState& im = *active[who[i]];
        const int t = static_cast<int>(im.tokens.size()) + step;  // index of the token fed now
        b.positions[h * m + i] = model_.token_position(std::min(t, model_.info().n_tokens - 1));
      }
  }
}

// A static tree: the catch-up forward gives the root's distribution, then one forward per depth
// d = 1..depth-1 feeds every fed node of depth d (all images alike; a node an image lacks is a
// filler row) and gives the distributions of their children, the nodes of depth d + 1.
//
// Children of a node with distribution P (the guided draft distribution at that node, as the
// chain computes it), in rank order r = 0, 1, ...:
// - sampling: child r is drawn from q_r = P without the tokens of children 0..r-1, renormalised
//   (sampling without replacement, EAGLE #74), and DraftNode::q stores q_r: the distribution the
//   token was drawn from. q_0 = P. This is exactly the q verify_draft walks with: it tests child 0
//   against its q, and after rejecting child r it zeroes that token in the q it used and
//   renormalises (the same arithmetic, normalise above), which gives q_{r+1}, the q stored here.
// - greedy (temperature 0): P is one-hot, so ranks come from the same guided distribution at
//   temperature 1 (same CFG, top-k, top-p; its argmax is P's): child r is the r-th most likely
//   token, EAGLE-1's top-k. Child 0 stores P as the chain does; later children store no q (one-hot
//   at their token: a greedy draft is deterministic).
// When fewer tokens have mass than the shape has children (a small top-k or top-p), the remaining
// children and their subtrees are left out of the tree.
//
// Uniforms: node c of depth d draws with token index t(d) and stream (Draft, round, its index i
// among the shape's nodes of depth d, low 8 bits), the high bits of i folded into the token
// index's top byte; a chain's only node per depth has i = 0: the chain's draw.
int ModelDrafter::max_nodes(int draft_len) const {
  if (!shape_) return draft_depth(draft_len);
  const int depth = draft_depth(draft_len);
  return static_cast<int>(
      std::count_if(shape_->depth.begin(), shape_->depth.end(), [&](int d) { return d <= depth; }));
}

void ModelDrafter::propose_tree(std::span<ImageState* const> active, std::span<const int> max_depth,
                                std::vector<DraftTree>& trees) {
  const TreeShape& shape = *shape_;
  const ArModelInfo& info = model_.info();
  const int T = info.prefix_len, V = info.vocab_size, N = shape.nodes();
  const bool cfg = params_.uses_cfg(), greedy = params_.temperature <= 0.0f;
  trees.assign(active.size(), {});
  int depth = 0;
  const std::vector<int> who = drafting(max_depth, depth);
  if (who.empty()) return;
  depth = std::min(depth, shape.max_depth());
  const std::vector<std::vector<int>> fed = fed_per_depth(shape);
  // Each node's index among the nodes of its depth, and each fed node's row among the tree rows.
  std::vector<int> index_in_depth(N), tree_row(N, -1);
  {
    std::vector<int> count(shape.max_depth(), 0);
    for (int u = 0; u < N; ++u) index_in_depth[u] = count[shape.depth[u] - 1]++;
    int row = 0;
    for (const auto& f : fed)
      for (int u : f) tree_row[u] = row++;
  }
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  StepBatch b;
  catch_up(active, who, b);
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    Slots& s = slots_.at(im.id);
    s.tree_base = T + static_cast<int>(im.tokens.size());
    s.fed_at.clear();
  }
  b.output_at = {b.n_new - 1};
  // node_of[i][u]: image i's tree index of shape node u (-1: not in its tree).
  std::vector<std::vector<int>> node_of(m, std::vector<int>(N, -1));
  std::vector<int> rows_of = {-1};  // the shape node of each output row (-1: the root)
  std::vector<float> dist(V), work(V);
  SamplingParams ranking = params_;
  ranking.temperature = 1.0f;
  const bool masked = !shape.is_chain();  // a chain attends causally, as the chain drafter does
  int tree_rows = 0;  // tree rows already in the cache (the same for every image)
  for (int d = 1; d <= depth; ++d) {
    session_.read(session_.forward(b).logits, logits_);
    const int n_out = static_cast<int>(b.output_at.size());
    for (int i = 0; i < m; ++i) {
      ImageState& im = *active[who[i]];
      if (d > max_depth[who[i]]) continue;
      im.stats.draft_forwards++;
      DraftTree& tree = trees[who[i]];
      const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of depth d
      for (int k = 0; k < n_out; ++k) {
        const int u = rows_of[k];
        const int parent = u < 0 ? -1 : node_of[i][u];
        if (u >= 0 && parent < 0) continue;  // a filler row
        const std::vector<int>& kids = children_[u < 0 ? N : u];
        if (kids.empty()) continue;
        const size_t row = static_cast<size_t>(i) * n_out + k;
        const size_t urow = static_cast<size_t>(m + i) * n_out + k;
        const float* cond = logits_.data() + row * V;
        const float* uncond = cfg ? logits_.data() + urow * V : nullptr;
        guided_distribution(cond, uncond, V, params_, t, dist);
        int previous = -1;
        for (size_t r = 0; r < kids.size(); ++r) {
          const int c = kids[r];
          const uint32_t level = static_cast<uint32_t>(index_in_depth[c]);
          const uint32_t token_key = static_cast<uint32_t>(t) | ((level >> 8) << 24);
          auto uniform = [&] {
            return im.rng.uniform(token_key, stream_id(Stream::Draft, im.round, level & 0xff));
          };
          DraftNode node;
          node.parent = parent;
          node.depth = d;
          if (r == 0) {
            node.q = dist;
            node.token = greedy ? argmax(node.q) : sample_index(node.q, uniform());
          } else {
            if (r == 1) {
              if (greedy) {
                guided_distribution(cond, uncond, V, ranking, t, work);
              } else {
                work = dist;
              }
            }
            work[previous] = 0.0f;
            if (!normalise(work)) break;  // no token left with mass: drop the other children
            node.token = greedy ? argmax(work) : sample_index(work, uniform());
            if (!greedy) node.q = work;
          }
          previous = node.token;
          node_of[i][c] = static_cast<int>(tree.size());
          tree.push_back(std::move(node));
        }
      }
    }
    if (d == depth) break;
    // Feed the fed nodes of depth d.
    const std::vector<int>& rows = fed[d - 1];
    const int w = static_cast<int>(rows.size());
    if (w == 0) break;
    b.n_new = w;
    b.tokens.assign(static_cast<size_t>(R) * w, 0);
    b.positions.assign(b.tokens.size(), 0);
    b.output_at.resize(w);
    for (int k = 0; k < w; ++k) b.output_at[k] = k;
    int stride = 0;
    for (int r = 0; r < R; ++r) stride = std::max(stride, session_.length(b.slots[r]) + w);
    b.mask.clear();
    b.mask_stride = 0;
    if (masked) {
      b.mask.assign(static_cast<size_t>(R) * w * stride, 0);
      b.mask_stride = stride;
    }
    for (int h = 0; h < (cfg ? 2 : 1); ++h)
      for (int i = 0; i < m; ++i) {
        const ImageState& im = *active[who[i]];
        Slots& s = slots_.at(im.id);
        const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of the fed nodes
        const int pos = model_.token_position(std::min(t, info.n_tokens - 1));
        const int r = h * m + i;
        check(session_.length(b.slots[r]) == s.tree_base + tree_rows,
              "internal: draft tree rows out of step");
        for (int k = 0; k < w; ++k) {
          const int u = rows[k], node = node_of[i][u];
          const size_t row = static_cast<size_t>(r) * w + k;
          b.tokens[row] = node >= 0 ? trees[who[i]][node].token : 0;
          b.positions[row] = pos;
          const int at = s.tree_base + tree_rows + k;  // the row's cache position
          if (h == 0 && node >= 0) {
            if (static_cast<int>(s.fed_at.size()) <= node) s.fed_at.resize(node + 1, -1);
            s.fed_at[node] = at;
          }
          if (!masked) continue;
          uint8_t* mrow = b.mask.data() + row * stride;
          std::fill(mrow, mrow + s.tree_base, uint8_t{1});  // the committed tokens
          mrow[at] = 1;
          if (node >= 0)
            for (int a = shape.parent[u]; a >= 0; a = shape.parent[a])
              mrow[s.tree_base + tree_row[a]] = 1;
        }
      }
    tree_rows += w;
    rows_of = rows;
  }
  // Every node of the trees has a fed_at entry (-1 when it was not fed).
  for (int i = 0; i < m; ++i) slots_.at(active[who[i]]->id).fed_at.resize(trees[who[i]].size(), -1);
}

}  // namespace tessera::speculative
