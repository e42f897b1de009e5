#include "speculative/drafters/hawk_drafter.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "sampling/sample_rows.h"
#include "speculative/streams.h"

#include "tessera/error.h"

namespace tessera::speculative {
namespace {
constexpr int32_t kNoError = 0;  // the heads' error flag, clear
// The vertical heads' logits one forward may hold (and as many bytes of distributions): a larger
// queue runs in several forwards. 64 images at depth 4 with guidance at V = 16384 would otherwise
// hold 640 rows of every vertical head at once.
constexpr int64_t kVerticalLogitsBytes = int64_t{64} << 20;
}  // namespace

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
      // Feature rows of one forward, both halves: to begin with, one image's committed rows of a
      // round (at most the tree's depth + 1) under each head kind used; grown to the most rows
      // and (head, row) pairs a forward has had.
      ws_(heads.make_workspace(
          2 * (shape_.max_depth() + 1),
          2 * (shape_.max_depth() + 1) * std::max({opt_.horizontal, opt_.vertical, 1}))),
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
  const int64_t row_bytes = int64_t{heads.vocab_size()} * static_cast<int64_t>(sizeof(float)) *
                            std::max(opt_.vertical, 1) * (params_.uses_cfg() ? 2 : 1);
  vertical_chunk_ = static_cast<int>(std::clamp<int64_t>(
      kVerticalLogitsBytes / row_bytes, shape_.max_depth() + 1, std::numeric_limits<int>::max()));
}

void HawkDrafter::set_vertical_chunk_rows(int rows) {
  check(rows >= 1, "internal: Hawk's vertical forwards of no row");
  vertical_chunk_ = rows;
}

void HawkDrafter::fit_workspace(int rows, int head_rows) {
  if (ws_.rows >= rows && ws_.head_rows >= head_rows) return;
  ws_ = heads_.make_workspace(std::max(ws_.rows, rows), std::max(ws_.head_rows, head_rows));
}

int HawkDrafter::draft_depth(int draft_len) const {
  return std::max(0, std::min(draft_len, shape_.max_depth()));
}

int HawkDrafter::max_nodes(int draft_len) const {
  const int depth = draft_depth(draft_len);
  return static_cast<int>(
      std::count_if(shape_.depth.begin(), shape_.depth.end(), [&](int d) { return d <= depth; }));
}

template <class TokenOf, class SamplingOf>
void HawkDrafter::head_distributions(int rows, int first, int count, TokenOf token,
                                     SamplingOf sampling) {
  const bool cfg = params_.uses_cfg();
  const Tensor logits = heads_.forward(ws_, cfg ? 2 * rows : rows, first, count);
  forwards_++;
  settings_.resize(static_cast<size_t>(count) * rows);
  for (int k = 0; k < count; ++k)
    for (int r = 0; r < rows; ++r)
      settings_[static_cast<size_t>(k) * rows + r] =
          device_sample_params(sampling(r), 0, 0, static_cast<uint32_t>(token(r, k)));
  rows_.compute(logits, rows, count, cfg, settings_, &flag_);
}

void HawkDrafter::copy_rows_to(const Tensor& src, Tensor& dst, std::span<const int32_t> pairs) {
  Backend& be = heads_.backend();
  const RowPairs p = upload_row_pairs(be, move_index_, pairs);
  if (!p.empty()) be.copy_rows(src, p.from, dst, p.to);
}

void HawkDrafter::queue_vertical(const ImageState& image, int first, const Tensor& cond,
                                 std::span<const int32_t> cond_rows, const Tensor* uncond,
                                 std::span<const int32_t> uncond_rows) {
  const bool cfg = params_.uses_cfg();
  const auto k = static_cast<int>(cond_rows.size());
  auto valid = [&](const Tensor* t, std::span<const int32_t> rows) {
    return t && t->data && t->dtype == DType::F32 && t->dim(1) == heads_.dim() &&
           std::all_of(rows.begin(), rows.end(),
                       [&](int32_t r) { return r >= 0 && r < t->dim(0); });
  };
  check(valid(&cond, cond_rows) &&
            (!cfg || (valid(uncond, uncond_rows) && uncond_rows.size() == cond_rows.size())),
        "internal: the Hawk drafter needs the target's post-norm hidden states");
  Backend& be = heads_.backend();
  // The rows to the end of the queue (grown, its rows kept), each half with one copy_rows.
  auto append = [&](Tensor& queue, const Tensor& src, std::span<const int32_t> rows) {
    if (!queue.data) queue = be.empty(DType::F32, {2 * (shape_.max_depth() + 1), heads_.dim()});
    while (queue.dim(0) < queued_rows_ + k) double_rows(be, queue);
    pairs_.assign(rows.begin(), rows.end());
    for (int r = 0; r < k; ++r) pairs_.push_back(queued_rows_ + r);
    copy_rows_to(src, queue, pairs_);
  };
  append(queued_cond_, cond, cond_rows);
  if (cfg) append(queued_uncond_, *uncond, uncond_rows);
  queued_.push_back({image.id, k, first, queued_rows_, image.sampling});
  queued_rows_ += k;
}

void HawkDrafter::run_vertical_heads() {
  // Every queued row of every image, in as few forwards as the bound on their logits allows
  // (vertical_chunk_ rows each half, whole entries): one a round unless the batch is large.
  for (size_t e0 = 0, e1; e0 < queued_.size(); e0 = e1) {
    int rows = queued_[e0].k;
    for (e1 = e0 + 1; e1 < queued_.size() && rows + queued_[e1].k <= vertical_chunk_; ++e1)
      rows += queued_[e1].k;
    run_vertical_chunk(e0, e1, rows);
  }
  queued_.clear();
  queued_rows_ = 0;
}

void HawkDrafter::run_vertical_chunk(size_t e0, size_t e1, int R) {
  // Eqs. 1-3: vertical head d on the row that predicted token i proposes token i + d W. Queue
  // rows row0..row0+R-1 in one forward (chunk row r: entry owner[r]'s).
  const int row0 = queued_[e0].row0, W = heads_.config().row_width;
  const bool cfg = params_.uses_cfg();
  fit_workspace(2 * R, (cfg ? 2 * R : R) * opt_.vertical);
  Backend& be = heads_.backend();
  Tensor cond = ws_.features.rows(0, R);
  be.copy(queued_cond_.rows(row0, R), cond);
  if (cfg) {
    Tensor uncond = ws_.features.rows(R, R);
    be.copy(queued_uncond_.rows(row0, R), uncond);
  }
  std::vector<int> owner(static_cast<size_t>(R));
  for (size_t e = e0; e < e1; ++e)
    std::fill_n(owner.begin() + (queued_[e].row0 - row0), queued_[e].k, static_cast<int>(e));
  head_distributions(
      R, heads_.num_heads(), opt_.vertical,
      [&](int r, int d) {
        const Queued& e = queued_[owner[r]];
        return e.first + (r - (e.row0 - row0)) + (d + 1) * W;
      },
      [&](int r) -> const SamplingParams& { return queued_[owner[r]].sampling; });
  // Their distributions go into each image's cache rows where they are: nothing comes back.
  for (size_t e = e0; e < e1; ++e)
    if (queued_[e].id >= 0) cache_rows(state_.at(queued_[e].id), queued_[e], R, row0);
}

void HawkDrafter::cache_rows(State& s, const Queued& e, int rows, int row0) {
  std::vector<int32_t>& from = pairs_;
  std::vector<int32_t> to;
  from.clear();
  for (int d = 0; d < opt_.vertical; ++d)
    for (int r = 0; r < e.k; ++r) {
      const int row = s.cache.put_row(e.first + r, d + 1, n_tokens_);
      if (row < 0) continue;
      from.push_back(d * rows + (e.row0 - row0) + r);
      to.push_back(row);
    }
  from.insert(from.end(), to.begin(), to.end());
  copy_rows_to(rows_.distributions(), s.rows, from);
}

std::vector<float> HawkDrafter::cached_q(int image_id, int token, int depth) const {
  const State& s = state_.at(image_id);
  for (const SpeculationCache::Entry& e : s.cache.pool(token))
    if (e.depth == depth) {
      std::vector<float> q(static_cast<size_t>(heads_.vocab_size()));
      heads_.backend().download(s.rows.rows(e.row, 1), q.data());
      return q;
    }
  return {};
}

void HawkDrafter::start(std::span<ImageState* const> images, const TargetPrefill& prefill) {
  // The prefill's last prefix row of each slot predicted the image's first token (the first
  // root): the horizontal heads' input for round 1, and the vertical heads' proposals for the
  // tokens d rows below token 0.
  Backend& be = heads_.backend();
  if (!flag_.data) flag_ = be.upload(&kNoError, DType::I32, {1});
  const int n = static_cast<int>(images.size()), rows = prefill.rows;
  const int W = heads_.config().row_width, V = heads_.vocab_size();
  for (int i = 0; i < n; ++i) {
    const int id = images[i]->id;
    State& s = state_.try_emplace(id, State{{std::max(W, 1), opt_.vertical, V}, {}}).first->second;
    s.cache.clear();
    const int32_t cond_row = i * rows + rows - 1, uncond_row = (n + i) * rows + rows - 1;
    features_.put(id, prefill.hidden, cond_row, &prefill.hidden, uncond_row);
    if (opt_.vertical == 0) continue;
    if (!s.rows.data) s.rows = be.empty(DType::F32, {s.cache.capacity(), V});
    // The vertical heads run in the next propose(), every image's rows in one forward (or a few:
    // run_vertical_heads).
    queue_vertical(*images[i], 0, prefill.hidden, std::span(&cond_row, 1), &prefill.hidden,
                   std::span(&uncond_row, 1));
  }
}

void HawkDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                          std::vector<DraftTree>& trees) {
  check_images_sampling(active, params_);
  run_vertical_heads();  // the last finish_round()s' and start()s' proposals into the caches
  trees.assign(active.size(), {});
  device_rows_ = {};
  Backend& be = heads_.backend();
  const int V = heads_.vocab_size();
  // Eq. 5's pools: for each drafting image and depth, the cached vertical proposals, nearest row
  // first, then the horizontal one; each member `samples` times. Every slot's q is copied into a
  // row of round_q_ (slot order: image, depth, pool index), where its token is drawn.
  struct Slot {
    int image, depth, k;
    int cache_row;  // the proposal's row in the image's cache; -1: horizontal head depth - 1
    int vertical;   // the vertical head's depth (0: horizontal)
  };
  std::vector<Slot> slot;
  std::vector<int> depth_of(active.size(), 0), first_slot(active.size() + 1, 0);
  for (size_t j = 0; j < active.size(); ++j) {
    first_slot[j] = static_cast<int>(slot.size());
    const ImageState& im = *active[j];
    const int depth = std::min(max_depth[j], draft_depth(max_depth[j]));
    if (depth <= 0) continue;
    depth_of[j] = depth;
    const State& s = state_.at(im.id);
    const int t = static_cast<int>(im.tokens.size()) - 1;  // the root's token index
    const int H = std::min(opt_.horizontal, depth);
    for (int d = 1; d <= depth && t + d < n_tokens_; ++d) {
      int k = 0;
      for (const SpeculationCache::Entry& e : s.cache.pool(t + d))
        if (e.depth <= opt_.vertical)
          for (int a = 0; a < opt_.samples; ++a)
            slot.push_back({static_cast<int>(j), d, k++, e.row, e.depth});
      if (d <= H)
        for (int a = 0; a < opt_.samples; ++a) slot.push_back({static_cast<int>(j), d, k++, -1, 0});
    }
  }
  first_slot[active.size()] = static_cast<int>(slot.size());
  const int n = static_cast<int>(slot.size());
  Tensor q = n > 0 ? grown_rows(be, round_q_, DType::F32, n, V).rows(0, n) : Tensor{};
  // Slots x0..x1-1 of one kind (vertical: from an image's cache; else horizontal) into q with one
  // copy_rows from `src`, slot x's row there being row_in_src(x).
  auto copy_slots = [&](const Tensor& src, int x0, int x1, bool vertical, auto row_in_src) {
    pairs_.clear();
    for (int x = x0; x < x1; ++x)
      if ((slot[x].cache_row >= 0) == vertical) pairs_.push_back(row_in_src(x));
    for (int x = x0; x < x1; ++x)
      if ((slot[x].cache_row >= 0) == vertical) pairs_.push_back(x);
    copy_rows_to(src, q, pairs_);
  };
  // The cached vertical proposals' rows into q, a copy_rows from each image's cache.
  for (size_t j = 0; j < active.size(); ++j)
    copy_slots(state_.at(active[j]->id).rows, first_slot[j], first_slot[j + 1], true,
               [&](int x) { return slot[x].cache_row; });
  // HorizSpec (Eq. 4): the horizontal heads on each image's root's predicting row, depth h + 1's
  // q at head h's row; every drafting image's in one forward (row r: image horizontal_of[r]),
  // then their slots' rows into q in one copy_rows.
  std::vector<int> horizontal_of, row_of(active.size(), -1);
  int H = 0;
  for (size_t j = 0; j < active.size(); ++j) {
    const int h = std::min(opt_.horizontal, depth_of[j]);
    if (h <= 0) continue;
    row_of[j] = static_cast<int>(horizontal_of.size());
    horizontal_of.push_back(static_cast<int>(j));
    H = std::max(H, h);
    active[j]->stats.draft_forwards++;
  }
  if (H > 0) {
    const int m = static_cast<int>(horizontal_of.size());
    fit_workspace(2 * m, (params_.uses_cfg() ? 2 * m : m) * H);
    ids_.clear();
    for (int j : horizontal_of) ids_.push_back(active[j]->id);
    features_.gather(ids_, ws_.features);
    head_distributions(
        m, 0, H,
        [&](int r, int h) {
          return static_cast<int>(active[horizontal_of[r]]->tokens.size()) + h;  // t + 1 + h
        },
        [&](int r) -> const SamplingParams& { return active[horizontal_of[r]]->sampling; });
    copy_slots(rows_.distributions(), 0, n, false,
               [&](int x) { return (slot[x].depth - 1) * m + row_of[slot[x].image]; });
  }
  if (n == 0) return;
  // The round's flag: the heads' since the last round (finish_round's vertical heads too), then
  // the draws'; it travels after the tokens, where the verifier (or the host, below) reads it.
  Tensor tokens = grown_rows(be, tokens_, DType::I32, n + 1, 1).rows(0, n + 1).view({n + 1});
  Tensor flag = tokens.rows(n, 1);
  be.copy(flag_, flag);
  be.upload_into(&kNoError, flag_);
  const bool device = device_drafts_ && !opt_.top;
  std::vector<double> confidence(n, 0.0);  // a sampled slot's Σ q², a top one's q(x)
  std::vector<int32_t> drawn;              // the host's tokens (host rounds)
  if (!opt_.top) {
    // Each slot's token drawn from its q where it is, with the host draw's uniform (token P,
    // stream (Draft, round, its pool index)).
    settings_.resize(n);
    for (int x = 0; x < n; ++x) {
      const ImageState& im = *active[slot[x].image];
      const auto P = static_cast<uint32_t>(static_cast<int>(im.tokens.size()) - 1 + slot[x].depth);
      settings_[x] = device_sample_params(im.sampling, im.rng.seed(), im.rng.image_index(), P);
      settings_[x].stream = stream_id(Stream::Draft, im.round, slot[x].k);
    }
    Tensor up =
        grown_rows(be, settings_up_, DType::U8,
                   static_cast<int64_t>(n) * static_cast<int64_t>(sizeof(DeviceSampleParams)), 1)
            .view({static_cast<int64_t>(n) * static_cast<int64_t>(sizeof(DeviceSampleParams))});
    be.upload_into(settings_.data(), up);
    SampleRowsOut out;
    out.tokens = tokens.rows(0, n);
    draw_rows(be, q, n, up, out, flag);
  }
  if (device) {
    device_rows_ = {q, tokens, {}};
    device_drafts_counted_.rounds++;
    if (budget_) {  // the nodes' values, which the budget reads: one small download
      Tensor sums = grown_rows(be, sums_, DType::F64, n, 1).rows(0, n).view({n});
      row_square_sums(be, q, n, sums);
      be.download(sums, confidence.data());
    }
  } else {
    // A host round: the slots' tokens with the flag (top: the flag) and q rows come back.
    drawn.resize(n + 1);
    if (opt_.top)
      be.download(flag, &drawn[n]);
    else
      be.download(tokens, drawn.data());
    if (drawn[n] != 0) throw Error(device_sample_failed());
    q_host_.resize(static_cast<size_t>(n) * V);
    be.download(q, q_host_.data());
  }
  auto q_of = [&](int x) {
    return std::span<const float>(q_host_.data() + static_cast<size_t>(x) * V,
                                  static_cast<size_t>(V));
  };
  std::vector<int> node_of(shape_.nodes());
  for (size_t j = 0; j < active.size(); ++j) {
    const int depth = depth_of[j];
    if (depth == 0) continue;
    // Depth d's candidates: their slots (rows of q) and, on the host, tokens.
    std::vector<std::vector<int>> at(depth);
    std::vector<std::vector<int32_t>> token(depth);
    for (int x = first_slot[j]; x < first_slot[j + 1]; ++x) {
      const int d = slot[x].depth;
      if (!opt_.top) {
        at[d - 1].push_back(x);
        token[d - 1].push_back(device ? kTokenOnDevice : drawn[x]);
        if (!device)
          for (float v : q_of(x)) confidence[x] += static_cast<double>(v) * v;
        continue;
      }
      // Deterministic candidates: each member's next most likely token not yet in the pool
      // (a repeat would be rejected for sure once its twin is), verified as one-hot drafts; a
      // member without one is left out.
      const std::span<const float> qx = q_of(x);
      int best = -1;
      for (int y = 0; y < V; ++y) {
        if (qx[y] <= 0.0f ||
            std::find(token[d - 1].begin(), token[d - 1].end(), y) != token[d - 1].end())
          continue;
        if (best < 0 || qx[y] > qx[best]) best = y;
      }
      if (best < 0) continue;
      at[d - 1].push_back(x);
      token[d - 1].push_back(best);
      confidence[x] = qx[best];
    }
    // The Cartesian product of the pools, cut to the static shape over slots.
    ImageState& im = *active[j];
    DraftTree& tree = trees[j];
    for (int u = 0; u < shape_.nodes(); ++u) {
      node_of[u] = -1;
      const int d = shape_.depth[u], p = shape_.parent[u], r = shape_.rank[u];
      if (d > depth || (p >= 0 && node_of[p] < 0)) continue;
      if (r >= static_cast<int>(at[d - 1].size())) continue;
      const int x = at[d - 1][r];
      DraftNode node;
      node.parent = p < 0 ? -1 : node_of[p];
      node.depth = d;
      node.token = token[d - 1][r];
      if (!opt_.top) {
        node.with_replacement = true;  // tested against its own q (Eq. 6)
        if (device) {
          node.q_row = node.token_row = x;
        } else {
          const std::span<const float> qx = q_of(x);
          node.q.assign(qx.begin(), qx.end());
        }
      }  // top: one-hot q (empty), accepted with p(x) and removed from p when rejected
      node.vertical = slot[x].vertical;
      // The node's value (EAGLE-2's path confidence): the product along its path of each slot's
      // confidence, q(x) for a top candidate and E_{x~q} q(x) = Σ q² for a sampled one, read
      // from q and never from the draw, so that the budget below keeps the walk exact.
      node.value = confidence[x] * (node.parent < 0 ? 1.0 : tree[node.parent].value);
      node_of[u] = static_cast<int>(tree.size());
      tree.push_back(std::move(node));
    }
    if (budget_ && tree.size() > 1) keep_best(im, tree);
  }
  // The verifier reads the flag after the tokens only when a node's token is there. A round whose
  // slots made no node (every depth-1 pool empty: vertical heads only, in the image's first row)
  // hands the flag on to the next round instead of dropping it.
  if (device && std::none_of(trees.begin(), trees.end(), [](const DraftTree& t) {
        return std::any_of(t.begin(), t.end(),
                           [](const DraftNode& n) { return n.token == kTokenOnDevice; });
      })) {
    be.copy(flag, flag_);
    device_rows_ = {};
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
  std::vector<int32_t> rows = {0};
  for (int a : outcome.accepted) rows.push_back(a + 1);
  const int k = static_cast<int>(rows.size());
  const int first = static_cast<int>(image.tokens.size()) - k;  // the token row 0 predicted
  State& s = state_.at(image.id);
  // The last row is the next round's horizontal input; all of them, moved where the heads read
  // them, are the vertical heads' (never through the host).
  features_.put(image.id, target.hidden, rows.back(), &target.hidden_uncond, rows.back());
  // The next round drafts from token image.tokens.size() on: earlier proposals are spent.
  s.cache.evict_before(static_cast<int>(image.tokens.size()));
  // The vertical heads' rows wait for the next propose(), where every image's run in one forward
  // (or a few)
  // (target.hidden is rewritten by the next target forward: the copies are queued before it).
  if (opt_.vertical > 0)
    queue_vertical(image, first, target.hidden, rows, &target.hidden_uncond, rows);
}

}  // namespace tessera::speculative
