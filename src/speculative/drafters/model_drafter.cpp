#include "speculative/drafters/model_drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "decode/guidance.h"
#include "sampling/sample_rows.h"
#include "tessera/error.h"

namespace tessera::speculative {

int device_chain_graph_key(int images, int depth, bool key_visible, int n_tokens) {
  check(depth >= 1 && depth < n_tokens, "internal: a device chain deeper than its image");
  return (images * n_tokens + depth) * 2 + (key_visible ? 1 : 0);
}

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

SessionOptions draft_session(const AutoregressiveModel& model, const SamplingParams& params,
                             int max_depth, int max_images, const std::optional<TreeSpec>& tree) {
  const TreeShape* shape = tree ? tree->shape() : nullptr;
  SessionOptions o;
  o.n_slots = max_images * (params.uses_cfg() ? 2 : 1);
  o.extra_capacity = max_depth + 2;
  o.max_new = 2;  // the catch-up feeds at most the last two committed tokens
  // and reads the roots at either: a joining image's at its one real row, the others' at their
  // second (catch_up)
  o.max_outputs_per_seq = 2;
  if (shape) {
    // The fed nodes of every depth stay in the cache until the round's compaction.
    o.extra_capacity = shape->nodes() + 2;
    for (const auto& f : fed_per_depth(*shape))
      o.max_new = std::max(o.max_new, static_cast<int>(f.size()));
    o.max_outputs_per_seq = o.max_new;
  }
  if (const DynamicTree* dt = tree ? tree->dynamic_tree() : nullptr) {
    // Every expansion feeds the frontier (top_k rows); all stay until the round's compaction.
    o.extra_capacity = dt->depth * dt->top_k + 2;
    o.max_new = std::max(o.max_new, dt->top_k);
    o.max_outputs_per_seq = o.max_new;
  }
  if (model.info().feature_dim > 0) {
    // The catch-up feeds a round's committed pairs (accepted drafts + 1), or the prefix's at the
    // start, padded to the longest; its padding rows sit in the cache until it removes them.
    o.max_new = std::max({o.max_new, max_depth + 1, model.info().prefix_len + 1});
    o.max_outputs_per_seq = o.max_new;
    o.extra_capacity += o.max_new;
    o.hidden_states = HiddenState::PreNorm;  // its hidden output: the predicted feature f^
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
                           int max_depth, int max_images, std::optional<TreeSpec> tree,
                           FeatureInputs features)
    : model_(model),
      params_(params),
      session_(model, draft_session(model, params, max_depth, max_images, tree)),
      features_(features),
      consecutive_positions_(consecutive_token_positions(model)) {
  check((model.info().feature_dim > 0) == reads_features(),
        "internal: a drafter model reads features exactly when FeatureInputs names them");
  max_new_ = draft_session(model, params, max_depth, max_images, tree).max_new;
  if (reads_features())
    pending_.emplace(model.backend(), model.info().feature_dim, params.uses_cfg());
  if (tree && tree->shape()) shape_ = *tree->shape();
  if (tree && tree->dynamic_tree()) dynamic_ = *tree->dynamic_tree();
  if (dynamic_ && can_sample_rows(model.backend(), model.info().vocab_size))
    ranking_.emplace(model.backend(), model.info().vocab_size, name());
  if (shape_) {
    children_.assign(shape_->nodes() + 1, {});
    for (int u = 0; u < shape_->nodes(); ++u) {
      const int p = shape_->parent[u];
      children_[p < 0 ? shape_->nodes() : p].push_back(u);  // in rank order (shape order)
    }
  }
}

HiddenState ModelDrafter::hidden_state() const {
  return features_.feature;
}

void ModelDrafter::queue_pairs(int id, std::span<const int32_t> tokens, const Tensor& cond,
                               std::span<const int64_t> cond_rows, const Tensor* uncond,
                               std::span<const int64_t> uncond_rows) {
  check(cond_rows.size() == tokens.size(), "internal: pairs without their features");
  Slots& s = slots_.at(id);
  s.pending.insert(s.pending.end(), tokens.begin(), tokens.end());
  pending_->append(id, cond, cond_rows, s.uncond >= 0 ? uncond : nullptr, uncond_rows);
}

void ModelDrafter::finish_round(ImageState& image, const DraftTree&, const VerifyOutcome& outcome,
                                const TargetRound& target) {
  if (reads_features()) {
    // The round's committed tokens, each with the target's feature at the row that predicted it:
    // row 0 (the root's) predicted the first, the row of accepted node a the one after it.
    // They stay on the backend: copied from the target's outputs to the pending table there.
    const Slots& s = slots_.at(image.id);
    std::vector<int64_t> rows = {0};
    for (int a : outcome.accepted) rows.push_back(a + 1);
    const int n = static_cast<int>(rows.size());
    check(target.hidden.data && (s.uncond < 0 || target.hidden_uncond.data) &&
              static_cast<int>(image.tokens.size()) >= n,
          "internal: the EAGLE drafter needs the target's hidden states");
    queue_pairs(image.id, std::span<const int32_t>(image.tokens).last(n), target.hidden, rows,
                &target.hidden_uncond, rows);
    return;
  }
  if (!shape_ && !dynamic_)
    return;  // the chain: the next catch-up cuts the cache after the accepted drafts
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

void ModelDrafter::start(std::span<ImageState* const> images, const TargetPrefill& prefill) {
  const bool cfg = params_.uses_cfg();
  if (reads_features()) {
    // The prefix pairs: the target's prefix features, each with the token after it (the prefix
    // token, LANTERN's zero id, then the first image token); fed by the first catch-up.
    const int n = static_cast<int>(images.size()), rows = prefill.rows;
    check(prefill.hidden.data && rows == model_.info().prefix_len + 1,
          "internal: the EAGLE drafter needs the target's prefix hidden states");
    for (int i = 0; i < n; ++i) {
      ImageState* im = images[i];
      Slots s;
      s.cond = session_.acquire_slot();
      if (cfg) s.uncond = session_.acquire_slot();
      slots_[im->id] = std::move(s);
      std::vector<int32_t> tokens(rows, features_.prefix_token);
      tokens.back() = im->tokens.at(0);
      // The unconditional slots' rows follow the n conditional slots' rows.
      std::vector<int64_t> at(rows), uncond_at(rows);
      for (int k = 0; k < rows; ++k) {
        at[k] = int64_t{i} * rows + k;
        uncond_at[k] = int64_t{n + i} * rows + k;
      }
      queue_pairs(im->id, tokens, prefill.hidden, at, &prefill.hidden, uncond_at);
    }
    return;
  }
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
  if (pending_) pending_->clear(image.id);
  session_.release_slot(it->second.cond);
  if (it->second.uncond >= 0) session_.release_slot(it->second.uncond);
  slots_.erase(it);
}

void ModelDrafter::run(const StepBatch& b, bool read_logits, std::span<const int32_t> token_moves) {
  Backend& be = model_.backend();
  if (defer_catch_up_) {
    // The device chain's catch-up: its inputs go up now (beside the chain's), its cache lengths
    // advance now, and its forward runs first in the chain's graph (draft_on_device).
    check(!read_logits && !b.features_on_device && token_moves.empty() && !deferred_.pending,
          "internal: a deferred catch-up reads its logits, features or moved tokens");
    deferred_.in = session_.prepare(b, 1);
    deferred_.n_out = static_cast<int>(b.output_at.size());
    deferred_.pending = true;
    session_.advance(b.slots, b.n_new);
    device_forwards_++;
    return;
  }
  Tensor index;
  if (b.features_on_device) {
    const auto n = static_cast<int64_t>(feature_rows_.size());
    check(n == static_cast<int64_t>(b.slots.size()) * b.n_new,
          "internal: a drafter forward's feature rows");
    index = grown_rows(be, feature_index_, DType::I32, n, 1).view({n});
    be.upload_into(feature_rows_.data(), index);
  }
  const RowPairs moves = upload_row_pairs(be, move_index_, token_moves);
  if (index.data || !moves.empty()) {
    last_ = session_.forward(b, [&](ForwardInputs& in) {
      if (index.data) {
        Tensor features = *in.features;
        be.get_rows(feature_from_, index, features);
      }
      if (!moves.empty()) {
        Tensor tokens = in.tokens.view({in.tokens.numel(), 1});
        be.copy_rows(tree_inputs_, moves.from, tokens, moves.to);
      }
    });
  } else {
    last_ = session_.forward(b);
  }
  if (read_logits) session_.read(last_.logits, logits_);
}

Tensor ModelDrafter::upload_roots_index(int m, int n_out, const std::vector<int>& out_row) {
  const int R = params_.uses_cfg() ? 2 * m : m;
  roots_host_.resize(R);
  for (int r = 0; r < R; ++r) roots_host_[r] = r * n_out + out_row[r % m];
  Tensor index = grown_rows(model_.backend(), roots_index_, DType::I32, R, 1).view({R});
  model_.backend().upload_into(roots_host_.data(), index);
  return index;
}

// Chains, static and dynamic trees alike read only the roots' rows of a catch-up: on the device
// loop they are gathered first (one small upload, the index; one get_rows), so that a t2i EAGLE
// drafter's first catch-up (a caption's pairs) is not ranked or drawn row by row.
int ModelDrafter::keep_roots(int m, int n_out, std::vector<int>& out_row) {
  const bool features = reads_features();
  if (n_out == 1 && !features) return n_out;
  Backend& be = model_.backend();
  const int R = params_.uses_cfg() ? 2 * m : m;
  const Tensor index = upload_roots_index(m, n_out, out_row);
  Tensor logits = grown_rows(be, device_roots_, DType::F32, R, model_.info().vocab_size);
  be.get_rows(last_.logits, index, logits);
  last_.logits = logits;
  if (features) {
    const void* was = device_roots_hidden_.data;
    Tensor hidden = grown_rows(be, device_roots_hidden_, DType::F32, R, last_.hidden.dim(-1));
    be.get_rows(last_.hidden, index, hidden);
    last_.hidden = hidden;
    if (device_roots_hidden_.data != was) graphs_.clear();  // the chain's first forward reads it
  }
  out_row.assign(m, 0);
  return 1;
}

bool ModelDrafter::can_burst() const {
  return !shape_ && !dynamic_ && !reads_features() && consecutive_positions_ &&
         can_sample_rows(model_.backend(), model_.info().vocab_size);
}

// The words a commit moves: the catch-up's two tokens (the last two committed), positions and
// cached lengths; each draw's token index and stream; each forward's positions; the chain's
// forward inputs' positions and cached lengths, which its graph leaves advanced by its steps.
bool ModelDrafter::burst_fields(std::vector<RoundField>& out) const {
  const DeviceChain& c = chain_;
  if (!c.burstable) return false;
  const int m = c.m, R = params_.uses_cfg() ? 2 * m : m, steps = c.depth - 1;
  auto word = [](const Tensor& t, int64_t i) { return t.ptr<int32_t>() + i; };
  auto add = [&](int32_t* w, int image, int32_t kind, int32_t value = 0) {
    out.push_back(RoundField{w, image, kind, value, 0});
  };
  const ForwardInputs& up = c.catch_up_in;
  for (int s = 0; s < R; ++s) {
    add(word(up.tokens, 2 * s), s % m, RoundField::kToken, -2);
    add(word(up.tokens, 2 * s + 1), s % m, RoundField::kToken, -1);
    add(word(up.positions, 2 * s), s % m, RoundField::kCommitted);
    add(word(up.positions, 2 * s + 1), s % m, RoundField::kCommitted);
    add(word(up.attn.past, s), s % m, RoundField::kCommitted);
  }
  auto* io = static_cast<uint8_t*>(device_io_.data);
  for (int step = 0; step < c.depth; ++step)
    for (int i = 0; i < m; ++i) {
      uint8_t* p =
          io + c.params_at + (static_cast<size_t>(step) * m + i) * sizeof(DeviceSampleParams);
      add(reinterpret_cast<int32_t*>(p + offsetof(DeviceSampleParams, token_index)), i,
          RoundField::kCommitted);
      add(reinterpret_cast<int32_t*>(p + offsetof(DeviceSampleParams, stream)), i,
          RoundField::kConstant,
          static_cast<int32_t>(stream_id(Stream::Draft, 1) - stream_id(Stream::Draft, 0)));
    }
  auto* positions = reinterpret_cast<int32_t*>(io + c.positions_at);
  for (int k = 0; k < steps * R; ++k) add(positions + k, k % R % m, RoundField::kCommitted);
  if (steps == 0) return true;
  for (int s = 0; s < R; ++s) {
    // The graph moved the first forward's positions to the last's, and its lengths by its steps.
    add(word(c.in.positions, s), s % m, RoundField::kCommitted, -(steps - 1));
    add(word(c.in.attn.past, s), s % m, RoundField::kCommitted, -steps);
  }
  return true;
}

void ModelDrafter::replay_burst_round() {
  check(chain_.burstable, "internal: a burst of a chain that cannot repeat");
  if (graphs_.replay_or_run(model_.backend(), chain_.key, chain_.ops))
    device_drafts_counted_.replayed++;
  device_drafts_counted_.rounds++;
  device_forwards_ += chain_.depth;  // the catch-up and the chain's steps
}

void ModelDrafter::end_burst(const ImageState& image, int tokens) {
  const Slots& s = slots_.at(image.id);
  session_.advance(std::span<const int32_t>(&s.cond, 1), tokens);
  if (s.uncond >= 0) session_.advance(std::span<const int32_t>(&s.uncond, 1), tokens);
}

// The device loop's chains (issue 42, items 1 and 3). Every step's host data goes up in one copy
// before the first draw: the rows' sampling settings (the host chain's token index and stream)
// and each forward's positions (clamped at the image's end as the host loop clamps them). Each
// draw writes its distributions into device_q_ and its tokens into the next forward's inputs
// (both halves); the forwards after the first draw, with their draws, run as one graph per (m,
// depth) on a GPU, captured once and replayed each round. Nothing comes back: the target pass
// reads the tokens where they are, and they reach the host with the round's verdicts.
void ModelDrafter::draft_on_device(std::span<ImageState* const> active, const std::vector<int>& who,
                                   std::span<const int> max_depth, int depth,
                                   const std::vector<int32_t>& slots,
                                   const std::vector<int>& out_row, std::vector<DraftTree>& trees) {
  Backend& be = model_.backend();
  const bool cfg = params_.uses_cfg(), features = reads_features();
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m, V = model_.info().vocab_size;
  const int N = model_.info().n_tokens, steps = depth - 1;  // forwards after the first draw
  const bool deferred = deferred_.pending;  // the catch-up's forward runs first, in the graph
  deferred_.pending = false;
  check(deferred || last_.logits.dim(0) == R,
        "internal: the device chain starts from one root row a slot");
  const size_t drawn = static_cast<size_t>(depth) * m;
  const size_t flag_at = drawn * sizeof(int32_t), back = flag_at + sizeof(int32_t);
  const size_t params_at = aligned_offset(back);
  const size_t positions_at = aligned_offset(params_at + drawn * sizeof(DeviceSampleParams));
  io_host_.assign(positions_at + static_cast<size_t>(steps) * R * sizeof(int32_t), 0);
  auto* ps = reinterpret_cast<DeviceSampleParams*>(io_host_.data() + params_at);
  auto* pos = reinterpret_cast<int32_t*>(io_host_.data() + positions_at);
  for (int step = 0; step < depth; ++step)
    for (int i = 0; i < m; ++i) {
      const ImageState& im = *active[who[i]];
      // The host chain's draw: token index of the node, stream (Draft, round).
      const int t = static_cast<int>(im.tokens.size()) + step;
      DeviceSampleParams& p = ps[static_cast<size_t>(step) * m + i];
      p = device_sample_params(im.sampling, im.rng.seed(), im.rng.image_index(),
                               static_cast<uint32_t>(t));
      p.stream = stream_id(Stream::Draft, im.round);
      // The forward after draw `step` feeds its token (index t) in both halves.
      if (step < steps)
        for (int h = 0; h < (cfg ? 2 : 1); ++h)
          pos[static_cast<size_t>(step) * R + h * m + i] =
              model_.token_position(std::min(t, N - 1));
    }
  const void* io_was = device_io_.data;
  const void* q_was = device_q_.data;
  Tensor io = grown_rows(be, device_io_, DType::U8, static_cast<int64_t>(io_host_.size()), 1);
  be.upload_into(io_host_.data(), io);
  grown_rows(be, device_q_, DType::F32, static_cast<int64_t>(drawn), V);
  // A deferred catch-up that gave a slot several rows (images catching up unevenly): the roots'
  // rows are gathered in the graph, from an index uploaded now.
  Tensor roots_index, roots;
  if (deferred && deferred_.n_out > 1) {
    roots_index = upload_roots_index(m, deferred_.n_out, out_row);
    roots = grown_rows(be, device_roots_, DType::F32, R, V);
  }
  const Tensor root_logits = deferred ? Tensor{} : last_.logits;
  // EAGLE: f^ at the roots' rows (keep_roots'), which the first forward reads.
  const Tensor root_hidden = features ? last_.hidden : Tensor{};
  // A graph holds addresses: the buffers' growth retires every graph.
  if (device_io_.data != io_was || device_q_.data != q_was) graphs_.clear();

  // Draw `step` from `logits` (one row per slot): q rows and the tokens, into the next forward's
  // inputs when there is one (then copied to the step's tokens), else straight to them. It holds
  // values, no references: a graph's replays (and a test's recorded ones) run it after this call.
  const Tensor flag = device_io_.bytes_as(flag_at, DType::I32, {1});
  auto draw = [this, m, cfg, params_at, flag](int step, const Tensor& logits,
                                              const Tensor* next_tokens) {
    Backend& be = model_.backend();
    const size_t bytes = static_cast<size_t>(m) * sizeof(DeviceSampleParams);
    Tensor p = device_io_.bytes_as(params_at + static_cast<size_t>(step) * bytes, DType::U8,
                                   {static_cast<int64_t>(bytes)});
    Tensor f = flag;
    const Tensor cond = logits.rows(0, m);
    const Tensor uncond = cfg ? logits.rows(m, m) : Tensor{};
    Tensor q = device_q_.rows(static_cast<int64_t>(step) * m, m);
    distribution_rows(be, cond, cfg ? &uncond : nullptr, m, p, q, f);
    // The token drawn from q with the same settings and uniform as the host chain's.
    SampleRowsOut out;
    Tensor mine =
        device_io_.bytes_as(static_cast<size_t>(step) * m * sizeof(int32_t), DType::I32, {m});
    out.tokens = next_tokens ? *next_tokens : mine;
    out.mirror = next_tokens && cfg ? m : 0;
    draw_rows(be, q, m, p, out, f);
    if (next_tokens) be.copy(next_tokens->rows(0, m), mine);
  };

  ForwardInputs in;
  if (steps > 0) {
    StepBatch b;
    b.n_new = 1;
    b.slots = slots;
    b.tokens.assign(R, 0);  // written by the draws
    b.positions.assign(pos, pos + R);
    b.output_at = {0};
    // EAGLE: each fed token reads f^ at the row it was drawn from (the root's, then the last
    // forward's), copied into the inputs on the backend.
    b.output_hidden = b.features_on_device = features;
    for (const int32_t slot : slots)
      check(session_.length(slot) + steps <= session_.capacity(),
            "internal: a device draft past the draft cache's capacity");
    in = session_.prepare(b);
  }
  const ForwardInputs catch_up_in = deferred ? deferred_.in : ForwardInputs{};
  // The catch-up's forward (deferred), the first draw, then each forward and its draw: one graph
  // per shape on a GPU, captured once and replayed each round.
  auto chain = [this, in, catch_up_in, deferred, roots_index, roots, root_logits, draw, steps, R,
                positions_at, root_hidden]() mutable {
    Backend& be = model_.backend();
    Tensor root = root_logits;
    if (deferred) {
      root = session_.run(catch_up_in).logits;
      if (roots_index.data) {
        be.get_rows(root, roots_index, roots);
        root = roots;
      }
    }
    draw(0, root, steps > 0 ? &in.tokens : nullptr);
    Tensor f_hat = root_hidden;
    for (int k = 1; k <= steps; ++k) {
      // Forward k feeds draw k - 1's tokens at their positions; draw k reads its logits.
      if (k > 1) {
        const Tensor from = device_io_.bytes_as(
            positions_at + static_cast<size_t>(k - 1) * R * sizeof(int32_t), DType::I32, {R});
        Tensor to = in.positions;
        be.copy(from, to);
      }
      if (in.features) {
        Tensor to = *in.features;
        be.copy(f_hat.rows(0, R), to);
      }
      const ForwardOutputs out = session_.run(in);
      f_hat = out.hidden;
      draw(k, out.logits, k < steps ? &in.tokens : nullptr);
      Tensor past = in.attn.past;
      be.add_scalar_i32(past, 1);
    }
  };
  GraphKey key(device_chain_graph_key(m, depth, in.attn.key_visible != nullptr, N));
  Session::add_to(key, in);
  Session::add_to(key, catch_up_in);
  key.add(roots_index).add(roots).add(root_logits).add(root_hidden).add(device_io_).add(device_q_);
  if (graphs_.replay_or_run(be, key, chain)) device_drafts_counted_.replayed++;
  if (steps > 0) {
    session_.advance(slots, steps);
    device_forwards_ += steps;
  }
  // A burst repeats this chain when every active image drew it after an even catch-up (two tokens
  // each, its root the last row: no gather).
  const bool burstable = deferred && !roots_index.data && m == static_cast<int>(active.size()) &&
                         catch_up_in.attn.n_new == 2;
  chain_ = {burstable, key, chain, in, catch_up_in, params_at, positions_at, m, depth};
  device_drafts_counted_.rounds++;
  device_rows_.q = device_q_.rows(0, static_cast<int64_t>(drawn));
  device_rows_.tokens = device_io_.bytes_as(0, DType::I32, {static_cast<int64_t>(drawn) + 1});
  for (int step = 0; step < depth; ++step)
    for (int i = 0; i < m; ++i) {
      ImageState& im = *active[who[i]];
      const int d = step + 1;               // depth of the node
      if (d > max_depth[who[i]]) continue;  // its draft is complete: a filler row
      im.stats.draft_forwards++;
      DraftNode node;
      node.parent = d - 2;
      node.depth = d;
      node.token = kTokenOnDevice;
      node.q_row = node.token_row = step * m + i;
      trees[who[i]].push_back(std::move(node));
    }
}

// Catch-up: the cache holds at least the committed tokens but the last two (see docs); cut it
// there (and drop the rows of a tree finish_round never compacted: they are no path) and feed
// those tokens for the images `who` (cond, then uncond); the last one's outputs are the root's.
// An image feeds its last two tokens, or its only one just after its prefill: images that joined
// a running batch (continuous batching) feed one, the others two, in one forward with a padding
// row after the real one (after it, so that no real row sees it; removed after the forward). So
// what an image feeds never depends on the images beside it.
int ModelDrafter::catch_up(std::span<ImageState* const> active, const std::vector<int>& who,
                           StepBatch& b, std::vector<int>& out_row, bool keep_on_device) {
  if (reads_features()) return catch_up_features(active, who, b, out_row, keep_on_device);
  const int T = model_.info().prefix_len;
  const bool cfg = params_.uses_cfg();
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  b.slots.resize(R);
  for (int i = 0; i < m; ++i) {
    const Slots& s = slots_.at(active[who[i]]->id);
    b.slots[i] = s.cond;
    if (cfg) b.slots[m + i] = s.uncond;
  }
  std::vector<int> feed(m), keep(m);
  int n = 1;
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    check(!im.tokens.empty(), "internal: drafter catch-up");
    feed[i] = std::min(2, static_cast<int>(im.tokens.size()));
    n = std::max(n, feed[i]);
    keep[i] = T + static_cast<int>(im.tokens.size()) - feed[i];
    const Slots& s = slots_.at(im.id);
    for (int h = 0; h < (cfg ? 2 : 1); ++h) {
      const int slot = b.slots[h * m + i];
      if (s.tree_base >= 0) session_.remove(slot, std::min(s.tree_base, session_.length(slot)));
      check(session_.length(slot) >= keep[i], "internal: draft cache behind");
      session_.remove(slot, keep[i]);
    }
  }
  b.n_new = n;
  b.tokens.assign(static_cast<size_t>(R) * n, 0);
  b.positions.resize(b.tokens.size());
  for (int h = 0; h < (cfg ? 2 : 1); ++h)
    for (int i = 0; i < m; ++i) {
      const ImageState& im = *active[who[i]];
      const int nt = static_cast<int>(im.tokens.size());
      for (int r = 0; r < n; ++r) {
        const size_t row = static_cast<size_t>(h * m + i) * n + r;
        const int f = std::min(r, feed[i] - 1);  // a padding row repeats the last real position
        b.positions[row] = model_.token_position(nt - feed[i] + f);
        if (r < feed[i]) b.tokens[row] = im.tokens[nt - feed[i] + r];
      }
    }
  // The roots' rows: the last one when every image feeds as many (the usual round), else each
  // image's own last real row.
  const bool uniform = std::all_of(feed.begin(), feed.end(), [n](int f) { return f == n; });
  b.output_at.clear();
  for (int r = uniform ? n - 1 : 0; r < n; ++r) b.output_at.push_back(r);
  run(b, !keep_on_device);
  out_row.resize(m);
  for (int i = 0; i < m; ++i) {
    out_row[i] = uniform ? 0 : feed[i] - 1;
    if (feed[i] < n)
      for (int h = 0; h < (cfg ? 2 : 1); ++h)
        session_.remove(b.slots[h * m + i], keep[i] + feed[i]);
  }
  return static_cast<int>(b.output_at.size());
}

// Feature mode: drop the last round's draft rows (the cache keeps the `fed` pairs with the
// target's features) and feed the pending pairs, at most max_new_ rows per forward: first the
// pairs beyond each image's last max_new_, then the last ones, whose forward gives the roots'
// outputs. Images with fewer pairs are padded (token 0, feature 0, after their real rows, so no
// real row sees them); padding rows are removed after each forward.
int ModelDrafter::catch_up_features(std::span<ImageState* const> active,
                                    const std::vector<int>& who, StepBatch& b,
                                    std::vector<int>& out_row, bool keep_on_device) {
  const bool cfg = params_.uses_cfg();
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m, P = model_.info().prefix_len;
  b.slots.resize(R);
  std::vector<Slots*> st(m);
  for (int i = 0; i < m; ++i) {
    st[i] = &slots_.at(active[who[i]]->id);
    b.slots[i] = st[i]->cond;
    if (cfg) b.slots[m + i] = st[i]->uncond;
    for (int h = 0; h < (cfg ? 2 : 1); ++h) session_.remove(b.slots[h * m + i], st[i]->fed);
    check(!st[i]->pending.empty(), "internal: an EAGLE catch-up without a committed pair");
  }
  const int last_pair = P + model_.info().n_tokens - 1;
  auto pair_position = [&](int k) {
    k = std::min(k, last_pair);
    return k < P ? model_.prefix_position(k) : model_.token_position(k - P);
  };
  std::vector<int> taken(m, 0);
  int n_out = 0;
  for (bool last = false; !last;) {
    // Rows each image feeds now: its excess over the last max_new_ pairs, then those.
    std::vector<int> take(m);
    int n = 0;
    for (int i = 0; i < m; ++i) {
      const int left = static_cast<int>(st[i]->pending.size()) - taken[i];
      take[i] = std::max(0, std::min(max_new_, left - max_new_));
      n = std::max(n, take[i]);
    }
    last = n == 0;
    if (last)
      for (int i = 0; i < m; ++i) {
        take[i] = static_cast<int>(st[i]->pending.size()) - taken[i];
        n = std::max(n, take[i]);
      }
    b.n_new = n;
    b.tokens.assign(static_cast<size_t>(R) * n, 0);
    b.positions.assign(b.tokens.size(), 0);
    // Features from the pending table on the backend; a padding row reads its zero row.
    b.features_on_device = true;
    feature_from_ = pending_->table();
    feature_rows_.assign(b.tokens.size(), 0);
    for (int h = 0; h < (cfg ? 2 : 1); ++h)
      for (int i = 0; i < m; ++i) {
        const Slots& s = *st[i];
        const int id = active[who[i]]->id;
        for (int r = 0; r < n; ++r) {
          const size_t row = static_cast<size_t>(h * m + i) * n + r;
          // A padding row takes the position of the image's last real row.
          const int j = std::min(r, std::max(take[i] - 1, 0)), k = taken[i] + j;
          b.positions[row] = pair_position(s.fed + j);
          if (r >= take[i]) continue;
          b.tokens[row] = s.pending[k];
          feature_rows_[row] = pending_->at(id, h, k);
        }
      }
    b.output_at.assign(last ? n : 1, 0);
    for (size_t r = 0; r < b.output_at.size(); ++r) b.output_at[r] = static_cast<int>(r);
    b.output_hidden = last;
    run(b, last && !keep_on_device);  // the earlier forwards' logits are never read
    out_row.resize(m);
    for (int i = 0; i < m; ++i) {
      st[i]->fed += take[i];
      taken[i] += take[i];
      out_row[i] = take[i] - 1;  // the last forward's: the root pair's row
      for (int h = 0; h < (cfg ? 2 : 1); ++h) session_.remove(b.slots[h * m + i], st[i]->fed);
    }
    n_out = static_cast<int>(b.output_at.size());
  }
  for (int i = 0; i < m; ++i) {
    st[i]->pending.clear();
    pending_->clear(active[who[i]]->id);  // after the forwards that read them, in order
  }
  return n_out;
}

void ModelDrafter::propose(std::span<ImageState* const> active, std::span<const int> max_depth,
                           std::vector<DraftTree>& trees) {
  check_images_sampling(active, params_);
  device_rows_ = {};
  deferred_.pending = false;
  chain_.burstable = false;
  if (shape_) {
    propose_tree(active, max_depth, trees);
    return;
  }
  if (dynamic_) {
    propose_dynamic(active, max_depth, trees);
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
  std::vector<int> out_row;
  // The device loop: the chain is drawn on the backend, only the tokens come back; a draft model
  // that reads no features runs its catch-up's forward in the chain's graph.
  defer_catch_up_ = device_drafts_ && !reads_features();
  int n_out = catch_up(active, who, b, out_row, device_drafts_);
  defer_catch_up_ = false;
  if (device_drafts_) {
    if (!deferred_.pending) keep_roots(m, n_out, out_row);
    draft_on_device(active, who, max_depth, depth, b.slots, out_row, trees);
    return;
  }
  std::vector<int32_t> next(R);
  for (int step = 0; step < depth; ++step) {
    if (step > 0) {
      b.output_at = {0};
      run(b);
      n_out = 1;
      out_row.assign(m, 0);
    }
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
      const size_t row = static_cast<size_t>(i) * n_out + out_row[i];
      const size_t urow = static_cast<size_t>(m + i) * n_out + out_row[i];
      guided_distribution(logits_.data() + row * V, cfg ? logits_.data() + urow * V : nullptr, V,
                          im.sampling, t, node.q);
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
    // Feature mode: each fed token reads the drafter's predicted feature at the row it was drawn
    // from (EAGLE's f^).
    b.output_hidden = reads_features();
    b.features_on_device = reads_features();
    if (reads_features()) {
      feature_from_ = last_.hidden;
      feature_rows_.resize(R);
      for (int r = 0; r < R; ++r) feature_rows_[r] = r * n_out + out_row[r % m];
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
  if (dynamic_) return dynamic_->max_nodes(draft_depth(draft_len));
  if (!shape_) return draft_depth(draft_len);
  const int depth = draft_depth(draft_len);
  return static_cast<int>(
      std::count_if(shape_->depth.begin(), shape_->depth.end(), [&](int d) { return d <= depth; }));
}

void ModelDrafter::propose_tree(std::span<ImageState* const> active, std::span<const int> max_depth,
                                std::vector<DraftTree>& trees) {
  const TreeShape& shape = *shape_;
  const ArModelInfo& info = model_.info();
  const int V = info.vocab_size, N = shape.nodes();
  const bool cfg = params_.uses_cfg(), greedy = params_.temperature <= 0.0f;
  trees.assign(active.size(), {});
  int depth = 0;
  const std::vector<int> who = drafting(max_depth, depth);
  if (who.empty()) return;
  depth = std::min(depth, shape.max_depth());
  const std::vector<std::vector<int>> fed = fed_per_depth(shape);
  // Each node's index among the nodes of its depth.
  std::vector<int> index_in_depth(N);
  {
    std::vector<int> count(shape.max_depth(), 0);
    for (int u = 0; u < N; ++u) index_in_depth[u] = count[shape.depth[u] - 1]++;
  }
  const int m = static_cast<int>(who.size());
  // The device loop: each depth's children are drawn where the logits are (draw_tree_children),
  // their q rows left there for the walk; only their tokens come back.
  const bool on_backend = device_drafts_ && can_sample_rows(model_.backend(), V);
  StepBatch b;
  std::vector<int> out_row;
  int n_out = catch_up(active, who, b, out_row, on_backend);
  if (on_backend) n_out = keep_roots(m, n_out, out_row);
  start_tree(active, who);
  std::vector<std::vector<int>> output_row(m);  // image i's node -> its row in the last forward
  // node_of[i][u]: image i's tree index of shape node u (-1: not in its tree).
  std::vector<std::vector<int>> node_of(m, std::vector<int>(N, -1));
  std::vector<int> rows_of = {-1};  // the shape node of each output row (-1: the root)
  std::vector<float> dist(on_backend ? 0 : V), work(on_backend ? 0 : V);
  const bool masked = !shape.is_chain();  // a chain attends causally, as the chain drafter does
  int tree_rows = 0;  // tree rows already in the cache (the same for every image)
  TreeChildren drawn;
  if (on_backend) {
    device_drafts_counted_.rounds++;
    // The round's q rows: every forward's rows, k children each (and greedy P rows).
    for (const std::vector<int>& kids : children_)
      drawn.k = std::max(drawn.k, static_cast<int>(kids.size()));
    int64_t rows = n_out;
    for (int d = 1; d < depth; ++d) rows += static_cast<int64_t>(fed[d - 1].size());
    Backend& be = model_.backend();
    grown_rows(be, device_q_, DType::F32, rows * m * (drawn.k + (greedy ? 1 : 0)), V);
    drawn.slots = rows * m * drawn.k;
    grown_rows(be, tree_tokens_, DType::I32, drawn.slots + 1, 1);
    grown_rows(be, tree_inputs_, DType::I32, drawn.slots, 1);
  }
  std::vector<int32_t> moves;  // the next forward's tokens on the device loop (run)
  for (int d = 1; d <= depth; ++d) {
    if (d > 1) {
      run(b, !on_backend, moves);
      n_out = static_cast<int>(b.output_at.size());
    }
    if (on_backend)
      draw_tree_children(active, who, d, n_out, out_row, rows_of, index_in_depth, drawn);
    for (int i = 0; i < m; ++i) {
      ImageState& im = *active[who[i]];
      if (d > max_depth[who[i]]) continue;
      im.stats.draft_forwards++;
      DraftTree& tree = trees[who[i]];
      const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of depth d
      for (size_t k = 0; k < rows_of.size(); ++k) {
        const int u = rows_of[k];
        const int parent = u < 0 ? -1 : node_of[i][u];
        if (u >= 0 && parent < 0) continue;  // a filler row
        const std::vector<int>& kids = children_[u < 0 ? N : u];
        if (kids.empty()) continue;
        const size_t kk = d == 1 ? static_cast<size_t>(out_row[i]) : k;  // the root: catch-up row
        const size_t row = static_cast<size_t>(i) * n_out + kk;
        const float* cond = on_backend ? nullptr : logits_.data() + row * V;
        const float* uncond = on_backend || !cfg
                                  ? nullptr
                                  : logits_.data() + (static_cast<size_t>(m + i) * n_out + kk) * V;
        int previous = -1;
        for (size_t r = 0; r < kids.size(); ++r) {
          DraftNode node;
          node.parent = parent;
          node.depth = d;
          if (on_backend) {
            // Drawn there, token and q: every child of the shape is a node, those drawn without a
            // token left become kTokenMissing with the verdicts (BackendVerifier::complete).
            const auto at = static_cast<int64_t>(row * drawn.k + r);
            node.token = kTokenOnDevice;
            node.token_row = static_cast<int32_t>(drawn.token_base + at);
            // Greedy: child 0's q is P (one-hot), the others none (one-hot at their token).
            node.q_row = static_cast<int32_t>(!greedy  ? drawn.q_base + at
                                              : r == 0 ? drawn.p_base + static_cast<int64_t>(row)
                                                       : -1);
          } else {
            const uint32_t level = static_cast<uint32_t>(index_in_depth[kids[r]]);
            const uint32_t token_key = static_cast<uint32_t>(t) | ((level >> 8) << 24);
            auto uniform = [&] {
              return im.rng.uniform(token_key, stream_id(Stream::Draft, im.round, level & 0xff));
            };
            if (r == 0) {
              guided_distribution(cond, uncond, V, im.sampling, t, dist);
              node.q = dist;
              node.token = greedy ? argmax(node.q) : sample_index(node.q, uniform());
            } else {
              if (r == 1) {
                if (greedy) {
                  guided_distribution(cond, uncond, V, ranking_params(im.sampling), t, work);
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
          }
          node_of[i][kids[r]] = static_cast<int>(tree.size());
          tree.push_back(std::move(node));
        }
      }
    }
    if (d == depth) break;
    // Feed the fed nodes of depth d.
    const std::vector<int>& rows = fed[d - 1];
    const int w = static_cast<int>(rows.size());
    if (w == 0) break;
    std::vector<std::vector<int>> nodes(m, std::vector<int>(w));
    for (int i = 0; i < m; ++i)
      for (int k = 0; k < w; ++k) nodes[i][k] = node_of[i][rows[k]];
    tree_batch(active, who, trees, nodes, d, out_row, n_out, tree_rows, masked, output_row, b);
    rows_of = rows;
    if (!on_backend) continue;
    // Their tokens go from where they were drawn into the forward's inputs, both halves: the
    // sources, then the destinations (as run() takes them).
    const int R = cfg ? 2 * m : m;
    std::vector<int32_t> to;
    moves.clear();
    for (int r = 0; r < R; ++r)
      for (int k = 0; k < w; ++k)
        if (const int node = nodes[r % m][k]; node >= 0) {
          moves.push_back(trees[who[r % m]][node].token_row);
          to.push_back(r * w + k);
        }
    moves.insert(moves.end(), to.begin(), to.end());
  }
  // Every node of the trees has a fed_at entry (-1 when it was not fed).
  for (int i = 0; i < m; ++i) slots_.at(active[who[i]]->id).fed_at.resize(trees[who[i]].size(), -1);
}

void ModelDrafter::draw_tree_children(std::span<ImageState* const> active,
                                      const std::vector<int>& who, int d, int n_out,
                                      const std::vector<int>& out_row,
                                      const std::vector<int>& rows_of,
                                      const std::vector<int>& index_in_depth, TreeChildren& drawn) {
  Backend& be = model_.backend();
  const bool cfg = params_.uses_cfg(), greedy = params_.temperature <= 0.0f;
  const int m = static_cast<int>(who.size()), K = drawn.k, N = shape_->nodes();
  const int64_t rows = int64_t{m} * n_out, n_kids = rows * K;
  check(drawn.drawn + n_kids <= drawn.slots, "internal: a static tree's token rows");
  // One upload: a zero word (the round's flag starts from it), the rows' settings (P's, the
  // greedy ranking's) and the children's.
  const size_t rows_at = aligned_offset(sizeof(int32_t));
  const size_t row_bytes = static_cast<size_t>(rows) * sizeof(DeviceSampleParams);
  const size_t ranking_at = aligned_offset(rows_at + row_bytes);
  const size_t kids_at = aligned_offset(ranking_at + (greedy ? row_bytes : 0));
  tree_host_.assign(kids_at + static_cast<size_t>(n_kids) * sizeof(DeviceSampleParams), 0);
  auto* p_rows = reinterpret_cast<DeviceSampleParams*>(tree_host_.data() + rows_at);
  auto* ranking = reinterpret_cast<DeviceSampleParams*>(tree_host_.data() + ranking_at);
  auto* kid = reinterpret_cast<DeviceSampleParams*>(tree_host_.data() + kids_at);
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    const auto t = static_cast<uint32_t>(static_cast<int>(im.tokens.size()) - 1 + d);
    const SamplingParams rank = ranking_params(im.sampling);  // greedy's ranks
    SamplingParams draw = im.sampling;                        // greedy: the ranks in argmax's order
    if (greedy) draw.temperature = 0.0f;
    for (int k = 0; k < n_out; ++k) {
      p_rows[i * n_out + k] = device_sample_params(im.sampling, 0, 0, t);
      if (greedy) ranking[i * n_out + k] = device_sample_params(rank, 0, 0, t);
    }
    // The host tree's uniforms: token index t (the level's high bits in its top byte), stream
    // (Draft, round, the child's index among its depth's nodes, low 8 bits).
    for (size_t k = 0; k < rows_of.size(); ++k) {
      const int u = rows_of[k];
      const int row = i * n_out + (d == 1 ? out_row[i] : static_cast<int>(k));
      const std::vector<int>& kids = children_[u < 0 ? N : u];
      for (size_t r = 0; r < kids.size(); ++r) {
        const auto level = static_cast<uint32_t>(index_in_depth[kids[r]]);
        DeviceSampleParams& p = kid[static_cast<size_t>(row) * K + r];
        p = device_sample_params(draw, im.rng.seed(), im.rng.image_index(),
                                 t | ((level >> 8) << 24));
        p.stream = stream_id(Stream::Draft, im.round, level & 0xff);
      }
    }
  }
  Tensor io = grown_rows(be, tree_io_, DType::U8, static_cast<int64_t>(tree_host_.size()), 1);
  be.upload_into(tree_host_.data(), io);
  auto settings = [&](size_t at, int64_t n) {
    return tree_io_.bytes_as(at, DType::U8, {n * static_cast<int64_t>(sizeof(DeviceSampleParams))});
  };
  // The round's error flag: the word after its tokens (the verifier reads it there).
  Tensor flag = tree_tokens_.rows(drawn.slots, 1);
  if (d == 1) be.copy(tree_io_.bytes_as(0, DType::I32, {1}), flag);
  const Tensor cond = last_.logits.rows(0, rows);
  const Tensor uncond = cfg ? last_.logits.rows(rows, rows) : Tensor{};
  // P: the children's source when sampling; greedy, child 0's q (one-hot) and the ranks come
  // from the distribution at temperature 1.
  Tensor p = greedy ? device_q_.rows(drawn.used, rows)
                    : grown_rows(be, tree_p_, DType::F32, rows, model_.info().vocab_size);
  distribution_rows(be, cond, cfg ? &uncond : nullptr, static_cast<int>(rows),
                    settings(rows_at, rows), p, flag);
  drawn.p_base = drawn.used;
  if (greedy) {
    drawn.used += rows;
    p = grown_rows(be, tree_p_, DType::F32, rows, model_.info().vocab_size);
    distribution_rows(be, cond, cfg ? &uncond : nullptr, static_cast<int>(rows),
                      settings(ranking_at, rows), p, flag);
  }
  drawn.q_base = drawn.used;
  drawn.token_base = drawn.drawn;
  Tensor q = device_q_.rows(drawn.used, n_kids);
  Tensor tokens = tree_tokens_.rows(drawn.drawn, n_kids);
  Tensor inputs = tree_inputs_.rows(drawn.drawn, n_kids);
  draw_children_rows(be, p, static_cast<int>(rows), K, settings(kids_at, n_kids), q, tokens,
                     &inputs);
  drawn.used += n_kids;
  drawn.drawn += n_kids;
  device_rows_.q = device_q_.rows(0, drawn.used);
  device_rows_.tokens = tree_tokens_.rows(0, drawn.slots + 1).view({drawn.slots + 1});
  device_rows_.inputs = tree_inputs_.rows(0, drawn.slots).view({drawn.slots});
}

// EAGLE-2's dynamic tree (arXiv:2406.16858 §4.1-4.2; its code `topK_genrate`, notes 4.3):
// 1. the catch-up forward gives the root's distribution q; its top_k tokens are the candidates
//    of depth 1, scored log q, and all of them the frontier;
// 2. expansion e = 1..depth: one forward feeds the frontier (depth e; tree mask, positions of
//    depth e, each row reading f^ at its parent's row in feature mode); each frontier node's
//    top_k tokens become candidates of depth e + 1 scored parent score + log q(child); the best
//    top_k of them by score are the next frontier;
// 3. rerank: the best `total` candidates by score are the drafts, laid out by depth, then parent,
//    then rank (the static trees' order, so siblings are verified in descending q).
// Choices the paper leaves open: q is the guided draft distribution as the chain samples from it
// (CFG, temperature, top-k, top-p; LANTERN applies its logits processor after the CFG too, see
// guided_distribution for the order), at temperature 1 when decoding greedily (the static tree's
// ranking); tokens without mass are no candidates; ties in q go to the lower token id, ties in
// score to the earlier candidate (created earlier: a parent before its children, so a kept child's
// parent is kept even when log q = 0). Children are top-k tokens, deterministic given the drafts'
// distributions: each node carries a one-hot q (empty DraftNode::q), which the exact walk
// verifies losslessly (accept x with probability p(x), then the residual without x).
// --draft-len N (max_depth) cuts the candidates at depth N, so an image expands min(depth, N-1)
// times; images drafting shallower feed filler rows meanwhile.
void ModelDrafter::propose_dynamic(std::span<ImageState* const> active,
                                   std::span<const int> max_depth, std::vector<DraftTree>& trees) {
  const DynamicTree& dt = *dynamic_;
  trees.assign(active.size(), {});
  int depth = 0;
  const std::vector<int> who = drafting(max_depth, depth);
  if (who.empty()) return;
  depth = std::min(depth, dt.max_depth());
  const int m = static_cast<int>(who.size());
  // The device loop keeps the candidates where the logits are (dynamic_frontier.h) when the
  // backend ranks this vocabulary there and an image's candidates stay few enough for a block to
  // place them all (O(C^2) comparisons); else the host keeps them, from logits read back.
  const bool on_backend = ranking_.has_value() && device_drafts_ &&
                          dynamic_layout(1, dt.top_k, depth, dt.total).C <= kMaxDeviceCandidates;
  std::vector<std::vector<DynamicCandidate>> cand(m);
  if (on_backend)
    expand_dynamic_on_device(active, who, max_depth, depth, cand);
  else
    expand_dynamic_on_host(active, who, max_depth, depth, cand);
  // Rerank: the best `total` candidates, laid out by depth, parent (tree index), rank.
  for (int i = 0; i < m; ++i) {
    const std::vector<DynamicCandidate>& c = cand[i];
    std::vector<int> best(c.size());
    std::iota(best.begin(), best.end(), 0);
    size_t keep = std::min(best.size(), static_cast<size_t>(dt.total));
    std::partial_sort(best.begin(), best.begin() + keep, best.end(),
                      [&c](int a, int b) { return candidate_better(c.data(), a, b); });
    best.resize(keep);
    // --draft-len auto: of the best candidates, as many as pay for their verification. Every
    // prefix of `best` is a tree (a child's score is at most its parent's, ties go to the parent).
    if (budget_ && keep > 1) {
      std::vector<double> values(keep);
      for (size_t k = 0; k < keep; ++k) values[k] = std::exp(c[best[k]].score);
      const int n = budget_(*active[who[i]], values);
      keep = std::clamp<size_t>(static_cast<size_t>(std::max(n, 1)), 1, keep);
      best.resize(keep);
    }
    std::vector<int> tree_index(c.size(), -1);
    for (int a : best) tree_index[a] = 0;  // kept
    for (int a : best)
      check(c[a].parent < 0 ||
                (c[a].parent < static_cast<int>(c.size()) && tree_index[c[a].parent] == 0),
            "internal: a dynamic tree keeps a node without its parent");
    DraftTree& tree = trees[who[i]];
    Slots& s = slots_.at(active[who[i]]->id);
    std::vector<int> fed_at(keep, -1);
    for (int d = 1; d <= depth; ++d) {
      std::vector<int> level;
      for (int a : best)
        if (c[a].depth == d) level.push_back(a);
      std::sort(level.begin(), level.end(), [&](int x, int y) {
        const int px = c[x].parent < 0 ? -1 : tree_index[c[x].parent];
        const int py = c[y].parent < 0 ? -1 : tree_index[c[y].parent];
        return px < py || (px == py && c[x].rank < c[y].rank);
      });
      for (int a : level) {
        DraftNode node;
        node.token = c[a].token;
        node.depth = d;
        node.parent = c[a].parent < 0 ? -1 : tree_index[c[a].parent];
        node.value = std::exp(c[a].score);
        tree_index[a] = static_cast<int>(tree.size());
        // The fed candidates' cache rows, for finish_round's compaction.
        if (c[a].fed >= 0) fed_at[tree_index[a]] = s.tree_base + c[a].fed;
        tree.push_back(std::move(node));
      }
    }
    s.fed_at = std::move(fed_at);
  }
}

// The host's expansions: each forward's logits read back, each row's guided distribution ranked
// there, the candidates and frontiers kept in `cand` (the functions of dynamic_frontier.h's
// order, written out on host vectors).
void ModelDrafter::expand_dynamic_on_host(std::span<ImageState* const> active,
                                          const std::vector<int>& who,
                                          std::span<const int> max_depth, int depth,
                                          std::vector<std::vector<DynamicCandidate>>& cand) {
  const DynamicTree& dt = *dynamic_;
  const int V = model_.info().vocab_size, K = dt.top_k, k = std::min(K, V);
  const bool cfg = params_.uses_cfg();
  const int m = static_cast<int>(who.size());
  std::vector<float> dist(V);
  std::vector<int> order(V);
  // Appends the top_k tokens of the distribution at `row` of the last forward as children of
  // candidate `parent` of image i.
  auto expand = [&](int i, int parent, int d, size_t row, int n_out) {
    const size_t at = static_cast<size_t>(i) * n_out + row;
    const float* cond = logits_.data() + at * V;
    const float* uncond =
        cfg ? logits_.data() + (static_cast<size_t>(m + i) * n_out + row) * V : nullptr;
    const ImageState& im = *active[who[i]];
    const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index
    guided_distribution(cond, uncond, V, ranking_params(im.sampling), t, dist);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int a, int b) {
      return dist[a] > dist[b] || (dist[a] == dist[b] && a < b);
    });
    const double base = parent < 0 ? 0.0 : cand[i][parent].score;
    for (int r = 0; r < k && dist[order[r]] > 0.0f; ++r) {
      DynamicCandidate c;
      c.token = order[r];
      c.parent = parent;
      c.depth = d;
      c.rank = r;
      c.score = base + std::log(static_cast<double>(dist[order[r]]));
      cand[i].push_back(c);
    }
  };
  StepBatch b;
  std::vector<int> out_row;
  int n_out = catch_up(active, who, b, out_row);
  start_tree(active, who);
  std::vector<std::vector<int>> frontier(m);  // candidate indices, best first
  for (int i = 0; i < m; ++i) {
    active[who[i]]->stats.draft_forwards++;
    expand(i, -1, 1, static_cast<size_t>(out_row[i]), n_out);
    for (int c = 0; c < static_cast<int>(cand[i].size()); ++c) frontier[i].push_back(c);
  }
  // Image i's tree index of candidate c once fed (the tree is built as it is fed, for the tree
  // mask; the rerank rebuilds it), and the output rows of the fed nodes.
  std::vector<DraftTree> fed_tree(active.size());
  std::vector<std::vector<int>> fed_node(m), output_row(m);
  int tree_rows = 0;
  for (int d = 1; d < depth; ++d) {
    // Feed the frontier of depth d.
    std::vector<std::vector<int>> nodes(m, std::vector<int>(K, -1));
    for (int i = 0; i < m; ++i) {
      if (d >= max_depth[who[i]]) frontier[i].clear();  // its candidates stop at depth d
      for (size_t f = 0; f < frontier[i].size(); ++f) {
        DynamicCandidate& c = cand[i][frontier[i][f]];
        DraftNode node;
        node.token = c.token;
        node.depth = d;
        node.parent = c.parent < 0 ? -1 : fed_node[i][c.parent];
        nodes[i][f] = static_cast<int>(fed_tree[who[i]].size());
        fed_tree[who[i]].push_back(node);
        fed_node[i].resize(cand[i].size(), -1);
        fed_node[i][frontier[i][f]] = nodes[i][f];
        c.fed = tree_rows + static_cast<int>(f);
      }
    }
    tree_batch(active, who, fed_tree, nodes, d, out_row, n_out, tree_rows, true, output_row, b);
    run(b);
    n_out = K;
    for (int i = 0; i < m; ++i) {
      if (frontier[i].empty()) continue;
      active[who[i]]->stats.draft_forwards++;
      const int first = static_cast<int>(cand[i].size());
      for (size_t f = 0; f < frontier[i].size(); ++f) expand(i, frontier[i][f], d + 1, f, K);
      std::vector<int> next(cand[i].size() - first);
      std::iota(next.begin(), next.end(), first);
      const size_t keep = std::min(next.size(), static_cast<size_t>(K));
      const DynamicCandidate* c = cand[i].data();
      std::partial_sort(next.begin(), next.begin() + keep, next.end(),
                        [c](int a, int b) { return candidate_better(c, a, b); });
      next.resize(keep);
      frontier[i] = next;
    }
  }
}

// The device loop's expansions (issue 42, item 3): the catch-up's roots and every expansion's rows
// ranked where the logits are (HeadRows), the candidates, frontiers and each feed's tokens,
// feature rows and tree mask written there (dynamic_frontier.h), one download of each image's best
// `total` candidates after the last. Nothing else comes back; nothing waits before it.
void ModelDrafter::expand_dynamic_on_device(std::span<ImageState* const> active,
                                            const std::vector<int>& who,
                                            std::span<const int> max_depth, int depth,
                                            std::vector<std::vector<DynamicCandidate>>& cand) {
  const DynamicTree& dt = *dynamic_;
  const ArModelInfo& info = model_.info();
  Backend& be = model_.backend();
  const int K = dt.top_k, m = static_cast<int>(who.size());
  const bool cfg = params_.uses_cfg();
  const int halves = cfg ? 2 : 1, R = halves * m;
  StepBatch b;
  std::vector<int> out_row;
  int n_out = catch_up(active, who, b, out_row, true);
  n_out = keep_roots(m, n_out, out_row);
  check(n_out == 1, "internal: a dynamic tree's roots, one row a slot");
  device_drafts_counted_.rounds++;
  start_tree(active, who);
  const DynamicLayout L = dynamic_layout(m, K, depth, dt.total);
  Tensor state = grown_rows(be, dynamic_state_, DType::U8, L.end, 1);
  // Up: each image's tree base and deepest draft, its counts 0.
  dynamic_host_.assign(static_cast<size_t>(L.download()), 0);
  for (int i = 0; i < m; ++i) {
    DynamicImage im;
    im.tree_base = slots_.at(active[who[i]]->id).tree_base;
    im.max_depth = max_depth[who[i]];
    std::memcpy(dynamic_host_.data() + L.images + i * sizeof(DynamicImage), &im, sizeof im);
  }
  Tensor images = state.bytes_as(0, DType::U8, {L.best});
  be.upload_into(dynamic_host_.data(), images);
  HeadRows::Ranked ranked = rank_on_backend(active, who, n_out, 1, K);
  expand_frontiers(be, state, L, ranked.ids, ranked.mass, ranked.flag, 1);
  int tree_rows = 0;
  for (int d = 1; d < depth; ++d) {
    // Feed the frontier of depth d: the host knows the rows' slots, positions and the mask's
    // stride; their tokens, f^ rows and mask rows are written on the backend.
    b.n_new = K;
    b.tokens.assign(static_cast<size_t>(R) * K, 0);
    b.positions.resize(b.tokens.size());
    b.output_at.resize(K);
    std::iota(b.output_at.begin(), b.output_at.end(), 0);
    b.mask.clear();
    b.mask_on_device = true;
    b.mask_stride = 0;
    b.output_hidden = reads_features();
    b.features_on_device = reads_features();
    for (int r = 0; r < R; ++r) {
      const ImageState& im = *active[who[r % m]];
      const Slots& s = slots_.at(im.id);
      check(session_.length(b.slots[r]) == s.tree_base + tree_rows,
            "internal: draft tree rows out of step");
      b.mask_stride = std::max(b.mask_stride, session_.length(b.slots[r]) + K);
      const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of the fed nodes
      std::fill_n(b.positions.begin() + static_cast<ptrdiff_t>(r) * K, K,
                  model_.token_position(std::min(t, info.n_tokens - 1)));
    }
    const int prev_rows = d == 1 ? n_out : K;  // the last forward's rows a slot
    Tensor rows;
    if (reads_features()) {
      feature_from_ = last_.hidden;
      rows = grown_rows(be, dynamic_feature_rows_, DType::I32, int64_t{R} * K, 1)
                 .view({int64_t{R} * K});
    }
    last_ = session_.forward(b, [&](ForwardInputs& in) {
      Tensor tokens = in.tokens;
      feed_frontiers(be, state, L, halves, d, tree_rows, prev_rows, tokens,
                     rows.data ? &rows : nullptr, in.attn.mask, in.attn.mask_stride);
      if (rows.data) {
        Tensor features = *in.features;
        be.get_rows(feature_from_, rows, features);
      }
    });
    b.mask_on_device = false;
    tree_rows += K;
    ranked = rank_on_backend(active, who, K, d + 1, K);
    expand_frontiers(be, state, L, ranked.ids, ranked.mass, ranked.flag, d + 1);
  }
  best_candidates(be, state, L);
  be.download(state.bytes_as(0, DType::U8, {L.download()}), dynamic_host_.data());
  for (int i = 0; i < m; ++i) {
    DynamicImage im;
    std::memcpy(&im, dynamic_host_.data() + L.images + i * sizeof(DynamicImage), sizeof im);
    if (im.failed != 0) throw Error(device_sample_failed());
    check(im.best >= 1 && im.best <= L.total, "internal: a dynamic tree's best candidates");
    active[who[i]]->stats.draft_forwards += im.expansions;
    cand[i].resize(static_cast<size_t>(im.best));
    std::memcpy(
        cand[i].data(),
        dynamic_host_.data() + L.best + static_cast<size_t>(i) * L.total * sizeof(DynamicCandidate),
        cand[i].size() * sizeof(DynamicCandidate));
  }
}

HeadRows::Ranked ModelDrafter::rank_on_backend(std::span<ImageState* const> active,
                                               const std::vector<int>& who, int n_out, int d,
                                               int K) {
  const int m = static_cast<int>(who.size());
  rank_settings_.resize(static_cast<size_t>(m) * n_out);
  for (int i = 0; i < m; ++i) {
    const ImageState& im = *active[who[i]];
    const auto t = static_cast<uint32_t>(static_cast<int>(im.tokens.size()) - 1 + d);
    std::fill_n(rank_settings_.begin() + static_cast<ptrdiff_t>(i) * n_out, n_out,
                device_sample_params(ranking_params(im.sampling), 0, 0, t));
  }
  // The forward's rows are slot-major (cond slots, then uncond), n_out a slot: image i's row k
  // at i n_out + k of each half.
  ranking_->compute(last_.logits, m * n_out, 1, params_.uses_cfg(), rank_settings_);
  return ranking_->top_with_mass_on_device(K);
}

// After the catch-up: the tree's rows start at the cache's end (finish_round compacts to them).
void ModelDrafter::start_tree(std::span<ImageState* const> active, const std::vector<int>& who) {
  for (int j : who) {
    Slots& s = slots_.at(active[j]->id);
    s.tree_base = session_.length(s.cond);
    check(reads_features() ||
              s.tree_base == model_.info().prefix_len + static_cast<int>(active[j]->tokens.size()),
          "internal: draft cache after the catch-up");
    s.fed_at.clear();
  }
}

// One tree forward, for static and dynamic trees alike: image i feeds its nodes nodes[i][k]
// (indices into trees[who[i]], all of depth d; -1 = a filler row), each at the position of depth
// d. With `masked`, a row attends to the committed tokens, its fed ancestors (EAGLE's tree mask)
// and itself; in feature mode it reads f^ at its parent's row of the last forward (out_row[i] for
// the root; output_row[i][parent] otherwise). Records each fed node's cache position (fed_at) and
// its output row (output_row) and advances tree_rows.
void ModelDrafter::tree_batch(std::span<ImageState* const> active, const std::vector<int>& who,
                              const std::vector<DraftTree>& trees,
                              const std::vector<std::vector<int>>& nodes, int d,
                              const std::vector<int>& out_row, int n_out, int& tree_rows,
                              bool masked, std::vector<std::vector<int>>& output_row,
                              StepBatch& b) {
  const ArModelInfo& info = model_.info();
  const bool cfg = params_.uses_cfg();
  const int m = static_cast<int>(who.size()), R = cfg ? 2 * m : m;
  const int w = static_cast<int>(nodes.at(0).size());
  b.n_new = w;
  b.tokens.assign(static_cast<size_t>(R) * w, 0);
  b.positions.assign(b.tokens.size(), 0);
  b.output_at.resize(w);
  for (int k = 0; k < w; ++k) b.output_at[k] = k;
  int stride = 0;
  for (int r = 0; r < R; ++r) stride = std::max(stride, session_.length(b.slots[r]) + w);
  b.mask.clear();
  b.mask_stride = 0;
  b.output_hidden = reads_features();
  b.features_on_device = reads_features();
  if (reads_features()) {  // f^ of the last forward's rows there (a filler row: its row 0)
    feature_from_ = last_.hidden;
    feature_rows_.assign(static_cast<size_t>(R) * w, 0);
  }
  if (masked) {
    b.mask.assign(static_cast<size_t>(R) * w * stride, 0);
    b.mask_stride = stride;
  }
  for (int h = 0; h < (cfg ? 2 : 1); ++h)
    for (int i = 0; i < m; ++i) {
      const ImageState& im = *active[who[i]];
      const DraftTree& tree = trees[who[i]];
      Slots& s = slots_.at(im.id);
      const int t = static_cast<int>(im.tokens.size()) - 1 + d;  // token index of the fed nodes
      const int pos = model_.token_position(std::min(t, info.n_tokens - 1));
      const int r = h * m + i;
      check(session_.length(b.slots[r]) == s.tree_base + tree_rows,
            "internal: draft tree rows out of step");
      for (int k = 0; k < w; ++k) {
        const int node = nodes[i][k];
        const size_t row = static_cast<size_t>(r) * w + k;
        // A token still on the device (a static tree's, kTokenOnDevice) is written there (run).
        b.tokens[row] = node >= 0 ? std::max(tree[node].token, 0) : 0;
        b.positions[row] = pos;
        if (reads_features() && node >= 0) {
          // The predicted feature at the row the node was drawn from (its parent's).
          const int parent = tree[node].parent;
          const int kk = parent < 0 ? out_row[i] : output_row[i][parent];
          feature_rows_[row] = r * n_out + kk;
        }
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
          for (int a = tree[node].parent; a >= 0; a = tree[a].parent) mrow[s.fed_at.at(a)] = 1;
      }
    }
  // Output rows are recorded after the features were read from the last forward's rows.
  for (int i = 0; i < m; ++i)
    for (int k = 0; k < w; ++k)
      if (nodes[i][k] >= 0) {
        std::vector<int>& o = output_row[i];
        if (static_cast<int>(o.size()) <= nodes[i][k]) o.resize(nodes[i][k] + 1, -1);
        o[nodes[i][k]] = k;
      }
  tree_rows += w;
}

}  // namespace tessera::speculative
