#include "speculative/speculative_decoder.h"

#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "decode/guidance.h"
#include "speculative/verify.h"
#include "tessera/error.h"

namespace tessera::speculative {

namespace {
int depth_cap(const LoopSettings& loop) {
  check(loop.rule && loop.drafter, "internal: speculative loop without rule or drafter");
  return std::max(0, loop.drafter->draft_depth(loop.draft_len));
}

// Most draft nodes of one round: the tree the drafter may propose (a chain: its depth).
int node_cap(const LoopSettings& loop) {
  return std::max(depth_cap(loop), loop.drafter->max_nodes(loop.draft_len));
}

SessionOptions target_session(const LoopSettings& loop, const SamplingParams& p, int max_images) {
  const int width = node_cap(loop) + 1;  // root + draft nodes (the tree's, not its depth)
  SessionOptions o;
  o.n_slots = max_images * (p.uses_cfg() ? 2 : 1);
  o.extra_capacity = width;
  o.max_new = width;
  o.max_outputs_per_seq = width;
  o.hidden_states = loop.drafter->hidden_state();
  return o;
}
}  // namespace

SpeculativeDecoder::SpeculativeDecoder(const AutoregressiveModel& target, int max_images,
                                       const DecoderSettings& settings, const LoopSettings& loop,
                                       GenerateStats& stats)
    : Decoder(target, target_session(loop, settings.sampling, max_images), settings, stats),
      loop_(loop),
      depth_cap_(depth_cap(loop)),
      node_cap_(node_cap(loop)) {
  // --draft-len auto sizes the trees a drafter shapes itself (dynamic) by their values: the image's
  // depth for this round is chosen before propose() (ImageAcceptance::depth).
  if (loop_.policy)
    loop_.drafter->set_node_budget([this](const ImageState& im, std::span<const double> values) {
      const ImageAcceptance& a = acceptance_.at(im.id);
      return loop_.policy->choose_nodes(a, a.depth, values);
    });
  check(settings.max_tokens == 0 || settings.max_tokens == target.info().n_tokens,
        "internal: speculative decoding generates whole images");
  Backend& be = target.backend();
  const int V = target.info().vocab_size;
  check_param(can_sample_rows(be, V) || settings.device_loop != DeviceLoop::On, "device-loop",
              "on: this model's rounds cannot be verified on " + be.name() + " (vocabulary " +
                  std::to_string(V) + ", at most " + std::to_string(kMaxDeviceSampleVocab) +
                  " on a GPU)");
  if (can_sample_rows(be, V) && (settings.device_loop == DeviceLoop::On ||
                                 (settings.device_loop == DeviceLoop::Auto && !be.host_memory())))
    verifier_ = std::make_unique<BackendVerifier>(be, V);
  consecutive_positions_ = consecutive_token_positions(target);
  check(loop.hold_depth >= 0, "internal: hold_depth must be at least 0");
  // By default a length is held only where chains can burst (the loop's rule walked on the
  // device).
  const bool bursts = verifier_ && loop_.drafter->can_burst() && consecutive_positions_ &&
                      loop_.rule->walk_rule().has_value();
  hold_ = loop.hold_depth > 0 ? loop.hold_depth : bursts ? settings.device_burst : 1;
}

SamplingParams SpeculativeDecoder::verify_params(const SamplingParams& image,
                                                 const AcceptanceRule& rule) const {
  SamplingParams p = image;
  if (p.temperature <= 0.0f) {
    p.temperature = 1.0f;
    if (!rule.greedy_filtered()) {
      p.top_k = 0;
      p.top_p = 1.0f;
    }
  }
  return p;
}

SpeculativeDecoder::~SpeculativeDecoder() {
  if (loop_.policy) loop_.drafter->set_node_budget({});
}

void SpeculativeDecoder::set_rule(int id, const AcceptanceRule* rule) {
  check(!image(id).prefilled, "internal: an image's rule is set before its prefill");
  if (static_cast<int>(rules_.size()) <= id) rules_.resize(id + 1, nullptr);
  rules_[id] = rule;
}

const AcceptanceRule& SpeculativeDecoder::rule_of(const ImageState& im) const {
  const AcceptanceRule* r = im.id < static_cast<int>(rules_.size()) ? rules_[im.id] : nullptr;
  return r ? *r : *loop_.rule;
}

bool SpeculativeDecoder::stage_on_backend(const std::vector<ImageState*>& active, int rows) {
  if (!verifier_) return false;
  to_verify_.clear();
  for (size_t j = 0; j < active.size(); ++j) {
    const ImageState& im = *active[j];
    if (!walk_rules_[j]) return false;
    DraftToVerify c;
    c.tree = &trees_[j];
    c.rule = *walk_rules_[j];
    c.verifying = verify_params(im.sampling, rule_of(im));
    c.seed = im.rng.seed();
    c.image_index = im.rng.image_index();
    c.round = im.round;
    c.base_token = static_cast<int>(im.tokens.size());
    c.draft_len = std::max(1, round_len_[j]);
    c.carry = loop_.drafter->carries_drafts();
    to_verify_.push_back(c);
  }
  verifier_->stage(rows, to_verify_, settings_.sampling.temperature <= 0.0f,
                   loop_.drafter->device_rows(), cfg() ? 2 : 1);
  return true;
}

ForwardOutputs SpeculativeDecoder::verify_pass(const StepBatch& b) {
  Backend& be = model_.backend();
  ForwardInputs in = session_.prepare(b);  // copied into the ops, which write its tokens
  const VerifyLaunch launch = verifier_->launch(cfg());
  GraphKey key;
  Session::add_to(key, in);
  launch.add_to(key);
  // A forward's launch is a few microseconds of host time for each of its kernels (GPT-XL's holds
  // hundreds), a replayed graph's about one (notes/gpu_machine.md): vanilla's device loop replays
  // its steps, and so does this pass. Shapes vary with --draft-len auto and the batch, so the
  // graphs are bounded (GraphCache) and so is this table.
  if (pass_outputs_.size() >= 256) {
    pass_outputs_.clear();
    graphs_.clear();
  }
  ForwardOutputs& out = pass_outputs_[key.bytes()];
  const auto ops = [this, in, launch, &out]() mutable {
    Backend& be = model_.backend();
    // Drafts drawn on the device: their rows go to the walk, their tokens into the inputs.
    BackendVerifier::gather_drafts(be, launch);
    BackendVerifier::write_drafts(be, launch, in.tokens);
    out = session_.run(in);
    BackendVerifier::verify_on_device(be, launch, out.logits);
  };
  if (graphs_.replay_or_run(be, key, ops)) stats_.replayed_verify_rounds++;
  session_.advance(b.slots, b.n_new);
  pass_ = {key, ops, in, launch};
  return out;
}

void SpeculativeDecoder::remove(int id) {
  loop_.drafter->release(image(id));
  if (id < static_cast<int>(rules_.size())) rules_[id] = nullptr;  // the id is reused
  Decoder::remove(id);
}

void SpeculativeDecoder::prefill(std::vector<ImageState*>& fresh) {
  Decoder::prefill(fresh);
  if (loop_.policy)
    for (ImageState* im : fresh) {
      if (static_cast<int>(acceptance_.size()) <= im->id) acceptance_.resize(im->id + 1);
      acceptance_[im->id] = loop_.policy->start();
    }
  const double t0 = now_s();
  const int64_t f0 = loop_.drafter->batched_forwards();
  TargetPrefill prefill;
  if (loop_.drafter->hidden_state() != HiddenState::None) {
    prefill.hidden = prefill_hidden_;
    prefill.rows = session_.prefill_rows();
  }
  loop_.drafter->start(fresh, prefill);
  stats_.draft_forward_passes += loop_.drafter->batched_forwards() - f0;
  stats_.draft_seconds += now_s() - t0;
}

void SpeculativeDecoder::round(std::vector<ImageState*>& active) {
  const bool greedy = settings_.sampling.temperature <= 0.0f;
  const int T = model_.info().prefix_len, N = model_.info().n_tokens;
  const int V = model_.info().vocab_size;
  max_depth_.clear();
  round_len_.clear();
  carried_.clear();
  for (ImageState* im : active) {
    const int left = N - static_cast<int>(im->tokens.size()) - 1;
    const bool drafting = loop_.max_rounds <= 0 || im->round < loop_.max_rounds;
    const int cap = drafting ? std::min(depth_cap_, left) : 0;
    round_len_.push_back(cap);
    // Auto: the choice reads only this image's past rounds, never this round's draws.
    const int depth =
        loop_.policy ? loop_.policy->choose_held(acceptance_[im->id], cap, hold_) : cap;
    max_depth_.push_back(depth);
    carried_.push_back(std::min(loop_.drafter->carried_drafts(*im), depth));
  }

  // Draft: on the device loop, a round whose images all have walk rules may leave the
  // drafts' distributions where the draft model's logits are (Drafter::set_device_drafts).
  double ts = now_s();
  const int64_t f0 = loop_.drafter->batched_forwards();
  // Each image's walk descriptor, once a round (stage_on_backend reads them after the draft).
  bool device_drafts = verifier_ != nullptr;
  walk_rules_.clear();
  if (verifier_)
    for (const ImageState* im : active) {
      walk_rules_.push_back(rule_of(*im).walk_rule());
      device_drafts = device_drafts && walk_rules_.back().has_value();
    }
  loop_.drafter->set_device_drafts(device_drafts);
  const Drafter::DeviceDrafts before = loop_.drafter->device_drafts();
  loop_.drafter->propose(active, max_depth_, trees_);
  const Drafter::DeviceDrafts after = loop_.drafter->device_drafts();
  stats_.device_drafted_rounds += after.rounds - before.rounds;
  stats_.replayed_draft_rounds += after.replayed - before.replayed;
  stats_.draft_forward_passes += loop_.drafter->batched_forwards() - f0;
  double te = now_s();
  stats_.draft_seconds += te - ts;
  const int m = static_cast<int>(active.size());
  int width = 0;  // draft nodes per image in this forward (smaller drafts are padded)
  bool chains = true;
  depths_.clear();
  for (int j = 0; j < m; ++j) {
    const DraftTree& tree = trees_[j];
    const int depth = tree_depth(tree);
    check(depth <= max_depth_[j] && static_cast<int>(tree.size()) <= node_cap_,
          "internal: the target pass verifies trees of at most the requested depth and nodes");
    depths_.push_back(depth);
    chains = chains && is_chain(tree);
    width = std::max(width, static_cast<int>(tree.size()));
  }
  const int rows = width + 1, halves = cfg() ? 2 : 1;

  // One target forward over [root, draft..., padding] for both halves. Chains run causally; a
  // batch with a tree gets an ancestor mask, as parent rows the session expands (each row sees
  // the past, the root, its ancestors and itself; a padding row the past, the root and itself),
  // and positions by depth.
  StepBatch b;
  b.n_new = rows;
  b.slots.resize(static_cast<size_t>(halves) * m);
  b.tokens.assign(b.slots.size() * rows, 0);
  b.positions.assign(b.tokens.size(), 0);
  if (!chains) b.parents.assign(b.tokens.size(), 0);
  for (int h = 0; h < halves; ++h)
    for (int j = 0; j < m; ++j) {
      const ImageState& im = *active[j];
      const DraftTree& tree = trees_[j];
      const int slot = h == 0 ? im.slot : im.uncond_slot;
      b.slots[h * m + j] = slot;
      const int root = static_cast<int>(im.tokens.size()) - 1;
      for (int r = 0; r < rows; ++r) {
        const size_t row = static_cast<size_t>(h * m + j) * rows + r;
        const bool real = r == 0 || r <= static_cast<int>(tree.size());
        b.tokens[row] = r == 0 ? im.tokens.back() : (real ? tree[r - 1].token : 0);
        if (chains) {
          b.positions[row] = model_.token_position(real ? root + r : root);
          continue;
        }
        b.positions[row] = model_.token_position(r > 0 && real ? root + tree[r - 1].depth : root);
        // Row 0 (the root) hangs below the past; node j's parent row is its parent's index + 1;
        // padding rows hang below the root.
        b.parents[row] = r == 0 ? -1 : (real ? tree[r - 1].parent + 1 : 0);
      }
    }
  b.output_at.resize(rows);
  for (int r = 0; r < rows; ++r) b.output_at[r] = r;
  b.output_hidden = loop_.drafter->hidden_state() != HiddenState::None;
  const bool on_backend = stage_on_backend(active, rows);
  const ForwardOutputs outputs = on_backend ? verify_pass(b) : session_.forward(b);
  if (!on_backend) session_.read(outputs.logits, logits_);
  stats_.forward_passes++;
  ts = now_s();
  stats_.target_seconds += ts - te;
  // A burst's bound reads the counts before this round's commit: images.tokens as yet unchanged.
  if (const int burst = on_backend && chains ? burst_rounds(active) : 1; burst > 1) {
    fields_.clear();
    bool full = loop_.drafter->burst_fields(fields_);
    for (int j = 0; j < m && full; ++j) full = depths_[j] == max_depth_[j];
    // A Jacobi window's next one names rows of its round's distributions: this round's gather
    // must read those rows, laid out as its own (the round before was verified on the device in
    // this round's shape, and some image carried drafts over).
    if (loop_.drafter->carries_drafts()) full = full && verifier_->gathers_own_rows();
    if (full) {
      run_burst(active, burst);
      return;
    }
  }
  // The device loop: every draft's verdict from the backend (the target distributions and walks
  // there), read back in one copy.
  const std::vector<DraftVerdict>* verdicts = nullptr;
  if (on_backend) {
    verdicts = &verifier_->read();
    for (int j = 0; j < m; ++j) {
      verifier_->complete(j, trees_[j]);
      depths_[j] = drafted_depth(trees_[j]);  // a static tree's missing nodes left out
    }
    stats_.device_rounds++;
  }

  // Verify every image.
  dists_.resize(static_cast<size_t>(rows) * V);
  for (int j = 0; j < m; ++j) {
    ImageState& im = *active[j];
    const DraftTree& tree = trees_[j];
    const int base = static_cast<int>(im.tokens.size());  // token index of row 0's prediction
    // Target distributions are computed when first asked for: a draft-model round rejected
    // early never needs the rows after the rejection. Row r predicts the token at its node's
    // depth below the root (r on a chain).
    const int used = static_cast<int>(tree.size()) + 1;
    computed_.assign(used, 0);
    double dist_s = 0.0;
    const AcceptanceRule& rule = rule_of(im);
    const SamplingParams verifying = verify_params(im.sampling, rule);
    TargetRound target;
    target.dist = verdicts
                      ? std::function<std::span<const float>(int)>(
                            [&](int r) { return verifier_->row(j, r); })
                      : [&](int r) {
                          std::span<float> out(dists_.data() + static_cast<size_t>(r) * V, V);
                          if (!computed_[r]) {
                            const double td = now_s();
                            guided_distribution(
                                logits_.data() + (static_cast<size_t>(j) * rows + r) * V,
                                cfg() ? logits_.data() + (static_cast<size_t>(m + j) * rows + r) * V
                                      : nullptr,
                                V, verifying, base + (r == 0 ? 0 : tree[r - 1].depth), out);
                            computed_[r] = 1;
                            dist_s += now_s() - td;
                          }
                          return std::span<const float>(out);
                        };
    if (verdicts) {
      target.device_dist = &verifier_->distributions();
      target.device_row0 = static_cast<int64_t>(j) * rows;
      target.carried = verifier_->carried(j);
    }
    if (b.output_hidden) {
      target.hidden = outputs.hidden.rows(static_cast<int64_t>(j) * rows, rows);
      if (cfg())
        target.hidden_uncond = outputs.hidden.rows(static_cast<int64_t>(m + j) * rows, rows);
    }
    VerifySettings vs;
    vs.rule = &rule;
    vs.draft_len = std::max(1, round_len_[j]);
    vs.greedy = greedy;
    const double tr = now_s();
    const VerifyOutcome out =
        verdicts ? BackendVerifier::outcome((*verdicts)[j], tree, im.stats)
                 : verify_draft(vs, tree, target.dist, im.rng, im.round, base, im.stats);
    stats_.rule_seconds += now_s() - tr - dist_s;
    append_tokens(im, tree, out);
    const int kept = static_cast<int>(out.accepted.size()) + 1;  // root + accepted drafts
    if (chains) {
      session_.remove(im.slot, T + base - 1 + kept);
      if (cfg()) session_.remove(im.uncond_slot, T + base - 1 + kept);
    } else {
      // The root stays at T + base - 1; the accepted nodes' rows (ascending: parents come first)
      // move up behind it, and everything else of the round is dropped.
      keep_.clear();
      for (int a : out.accepted) keep_.push_back(T + base + a);
      session_.compact(im.slot, T + base, keep_);
      if (cfg()) session_.compact(im.uncond_slot, T + base, keep_);
    }
    loop_.drafter->finish_round(im, tree, out, target);
    if (loop_.policy) {
      double value_sum = 0.0;
      for (const DraftNode& node : tree) value_sum += node.value;
      loop_.policy->observe(acceptance_[im.id], depths_[j], carried_[j], kept - 1,
                            drafted_nodes(tree), value_sum);
    }
    count_round(im, tree, depths_[j], kept);
  }
  stats_.verify_seconds += now_s() - ts;
}

void SpeculativeDecoder::append_tokens(ImageState& im, const DraftTree& tree,
                                       const VerifyOutcome& out) {
  const size_t base = im.tokens.size();
  for (size_t a = 0; a < out.accepted.size(); ++a) {
    im.stats.accepted_depth[base + a] = static_cast<uint8_t>(std::min<size_t>(a + 1, 255));
    if (const int v = tree[out.accepted[a]].vertical; v > 0) {
      im.stats.accepted_vertical.resize(im.stats.accepted_depth.size(), 0);
      im.stats.accepted_vertical[base + a] = static_cast<uint8_t>(std::min(v, 255));
    }
    im.tokens.push_back(tree[out.accepted[a]].token);
  }
  im.tokens.push_back(out.next_token);
}

void SpeculativeDecoder::count_round(ImageState& im, const DraftTree& tree, int depth, int kept) {
  const size_t d = static_cast<size_t>(depth);  // by depth: a tree has more nodes
  if (im.stats.rounds_by_depth.size() <= d) im.stats.rounds_by_depth.resize(d + 1, 0);
  im.stats.rounds_by_depth[d]++;
  im.stats.rounds++;
  im.stats.draft_nodes += drafted_nodes(tree);
  im.stats.target_forwards++;
  im.stats.tokens = static_cast<int64_t>(im.tokens.size());
  im.round++;
  im.done = static_cast<int>(im.tokens.size()) >= model_.info().n_tokens;
  if (settings_.on_tokens) settings_.on_tokens(kept);
}

// After a round staged on the backend (so every image's rule has a walk descriptor).
int SpeculativeDecoder::burst_rounds(const std::vector<ImageState*>& active) const {
  const int N = model_.info().n_tokens;
  if (settings_.device_burst <= 1 || active.empty() || !consecutive_positions_ ||
      !loop_.drafter->can_burst())
    return 1;
  // Every round of the burst starts more than the cap's chain (depth_cap_ >= k) from its image's
  // end (an image's round commits at most its chain k + 1 tokens), so each round's cap is the
  // first's (the L of COOL-SD's schedule, staged once) and every round drafts the same chains: k
  // for each image, its depth this round (under --draft-len auto, held for the rounds the image
  // still holds it; images of a batch may hold different ones).
  const int K = depth_cap_;
  int64_t burst = settings_.device_burst;
  for (size_t j = 0; j < active.size(); ++j) {
    const ImageState* im = active[j];
    const int n = static_cast<int>(im->tokens.size()), k = max_depth_[j];
    if (k < 1 || n < 2 || N - 1 - K - n < 0) return 1;
    burst = std::min<int64_t>(burst, (N - 1 - K - n) / (k + 1) + 1);
    if (loop_.max_rounds > 0) burst = std::min(burst, loop_.max_rounds - im->round);
    if (loop_.policy) burst = std::min<int64_t>(burst, acceptance_[im->id].held + 1);
  }
  return static_cast<int>(std::max<int64_t>(burst, 1));
}

// The burst's first round was drafted and its pass run from the host's inputs; its verdicts stay
// on the device. Each round's commit (chain_commit.h) appends the images' tokens to the history
// and moves the next round's inputs (fields_: the drafter's, the verifier's, the target pass's),
// so that the next round is the same graphs again. One copy back at the end: the history, each
// round's committed counts and the flag of a non-finite row.
void SpeculativeDecoder::run_burst(std::vector<ImageState*>& active, int burst) {
  const double t0 = now_s();
  Backend& be = model_.backend();
  const int m = static_cast<int>(active.size()), N = model_.info().n_tokens;
  // Image j's chain is max_depth_[j]; the pass's width the longest (shorter chains padded).
  const int width = *std::max_element(max_depth_.begin(), max_depth_.end());
  const int T = model_.info().prefix_len, halves = cfg() ? 2 : 1, rows = width + 1;
  verifier_->burst_fields(fields_);
  const ForwardInputs& in = pass_.in;
  check(in.attn.n_seq == halves * m && in.attn.n_new == rows,
        "internal: a burst's pass is not a chain of every image");
  // Jacobi windows (SJD, GSD on it): the target drafts for itself, so each round's commit refills
  // every image's window (refill_jacobi_window) and its tokens go to the walk's nodes (with their
  // flags and q rows) and to the pass's rows after the root.
  const bool windows = loop_.drafter->carries_drafts();
  if (windows) verifier_->window_fields(fields_);
  for (int s = 0; s < halves * m; ++s) {
    const int j = s % m;
    fields_.push_back({in.tokens.ptr<int32_t>() + s * rows, j, RoundField::kToken, -1, 0});
    for (int c = 0; windows && c < max_depth_[j]; ++c)
      fields_.push_back({in.tokens.ptr<int32_t>() + s * rows + 1 + c, j, RoundField::kWindow,
                         (j * width + c) * kWindowWords + kWindowToken, 0});
    for (int r = 0; r < rows; ++r)
      fields_.push_back({in.positions.ptr<int32_t>() + s * rows + r, j, RoundField::kCommitted});
    fields_.push_back({in.attn.past.ptr<int32_t>() + s, j, RoundField::kCommitted});
  }
  // Each word has one field: a GPU applies them in parallel.
  std::vector<const int32_t*> words;
  for (const RoundField& f : fields_) words.push_back(f.word);
  std::sort(words.begin(), words.end());
  check(std::adjacent_find(words.begin(), words.end()) == words.end(),
        "internal: a burst's input word with two fields");
  // One buffer: the flag, the counts, the history, each round's committed tokens, the windows
  // (the last refill's words come back: the next round's window), the fields.
  const size_t flag_at = 0, state_at = sizeof(int32_t);
  const size_t history_at = aligned_offset(state_at + m * sizeof(int32_t));
  const size_t record_at =
      aligned_offset(history_at + static_cast<size_t>(m) * N * sizeof(int32_t));
  const size_t window_images_at =
      aligned_offset(record_at + static_cast<size_t>(burst) * m * sizeof(int32_t));
  const size_t n_window_words = windows ? static_cast<size_t>(m) * width * kWindowWords : 0;
  const size_t window_words_at =
      aligned_offset(window_images_at + (windows ? m * sizeof(WindowImage) : 0));
  const size_t fields_at = aligned_offset(window_words_at + n_window_words * sizeof(int32_t));
  const size_t total = fields_at + fields_.size() * sizeof(RoundField);
  burst_host_.assign(total, 0);
  auto* n0 = reinterpret_cast<int32_t*>(burst_host_.data() + state_at);
  auto* history = reinterpret_cast<int32_t*>(burst_host_.data() + history_at);
  for (int j = 0; j < m; ++j) {
    n0[j] = static_cast<int32_t>(active[j]->tokens.size());
    std::copy(active[j]->tokens.begin(), active[j]->tokens.end(),
              history + static_cast<size_t>(j) * N);
  }
  if (windows) {
    auto* w = reinterpret_cast<WindowImage*>(burst_host_.data() + window_images_at);
    for (int j = 0; j < m; ++j)
      w[j] = {active[j]->rng.seed(), active[j]->rng.image_index(), active[j]->round, max_depth_[j],
              j * rows};
  }
  std::memcpy(burst_host_.data() + fields_at, fields_.data(), fields_.size() * sizeof(RoundField));
  Tensor buffer = grown_rows(be, burst_buffer_, DType::U8, static_cast<int64_t>(total), 1);
  be.upload_into(burst_host_.data(), buffer);
  Tensor flag = buffer.bytes_as(flag_at, DType::I32, {1});  // each round's, or-ed by its commit
  Tensor state = buffer.bytes_as(state_at, DType::I32, {m});
  Tensor on_device = buffer.bytes_as(history_at, DType::I32, {m, N});
  const Tensor fields = buffer.bytes_as(
      fields_at, DType::U8, {static_cast<int64_t>(fields_.size() * sizeof(RoundField))});
  const VerifyLaunch& launch = pass_.launch;
  JacobiWindows jacobi;
  if (windows) {
    check(launch.carried.data, "internal: a burst of windows without their carry-over draws");
    jacobi.carried = launch.carried;
    jacobi.images = buffer.bytes_as(window_images_at, DType::U8,
                                    {static_cast<int64_t>(m * sizeof(WindowImage))});
    jacobi.words =
        buffer.bytes_as(window_words_at, DType::I32, {static_cast<int64_t>(n_window_words)});
    jacobi.vocab = model_.info().vocab_size;
  }
  const Drafter::DeviceDrafts before = loop_.drafter->device_drafts();
  const int64_t f0 = loop_.drafter->batched_forwards();
  double draft_s = 0.0;
  for (int r = 0; r < burst; ++r) {
    if (r > 0) {
      const double td = now_s();
      loop_.drafter->replay_burst_round();
      draft_s += now_s() - td;
      if (graphs_.replay_or_run(be, pass_.key, pass_.ops)) stats_.replayed_verify_rounds++;
    }
    Tensor committed =
        buffer.bytes_as(record_at + static_cast<size_t>(r) * m * sizeof(int32_t), DType::I32, {m});
    commit_chain_round(be, launch.verdicts, launch.nodes, m, width, state, on_device, committed,
                       fields, static_cast<int>(fields_.size()), launch.flag, flag,
                       windows ? &jacobi : nullptr);
  }
  const Drafter::DeviceDrafts after = loop_.drafter->device_drafts();
  stats_.device_drafted_rounds += after.rounds - before.rounds;
  stats_.replayed_draft_rounds += after.replayed - before.replayed;
  stats_.draft_forward_passes += loop_.drafter->batched_forwards() - f0;
  // The burst's one copy back, the rounds' flags with it.
  be.download(buffer.bytes_as(0, DType::U8, {static_cast<int64_t>(fields_at)}), burst_host_.data());
  verifier_->unstage();
  int32_t failed = 0;
  std::memcpy(&failed, burst_host_.data() + flag_at, sizeof failed);
  if (failed) throw Error(device_sample_failed());
  stats_.forward_passes += burst - 1;
  stats_.device_rounds += burst;
  stats_.burst_rounds += burst;
  // The rounds after the first, on the device in one go. Their drafts' time is what the host
  // spent drafting: all of it where the backend runs synchronously (the CPU), the launches alone
  // on a GPU, whose draft kernels run asynchronously and end under the target's time (the host
  // waits at the copy back).
  stats_.draft_seconds += draft_s;
  stats_.target_seconds += now_s() - t0 - draft_s;

  const double ts = now_s();
  const auto* record = reinterpret_cast<const int32_t*>(burst_host_.data() + record_at);
  const auto* window = reinterpret_cast<const int32_t*>(burst_host_.data() + window_words_at);
  DraftTree chain;
  for (int j = 0; j < m; ++j) {
    ImageState& im = *active[j];
    const int k = max_depth_[j];
    chain.resize(static_cast<size_t>(k));
    for (int c = 0; c < k; ++c) chain[c].parent = c - 1, chain[c].depth = c + 1;
    const int start = static_cast<int>(im.tokens.size());
    int last_start = start;
    int carried = carried_[j];  // the round's drafts carried over (a Jacobi window's)
    VerifyOutcome out;
    for (int r = 0; r < burst; ++r) {
      const int committed = record[static_cast<size_t>(r) * m + j];
      const int n = static_cast<int>(im.tokens.size());
      check(committed >= 1 && committed <= k + 1 && n + committed <= N,
            "internal: a burst's round committed " + std::to_string(committed) + " tokens");
      const int32_t* row = history + static_cast<size_t>(j) * N + n;
      DraftVerdict v;
      v.accepted = committed - 1;
      v.last = v.accepted - 1;
      v.next_token = row[v.accepted];
      v.rejected = v.accepted < k ? 1 : 0;
      for (int c = 0; c < k; ++c) chain[c].token = c < v.accepted ? row[c] : 0;
      out = BackendVerifier::outcome(v, chain, im.stats);
      append_tokens(im, chain, out);
      // A draft model's later rounds drew k steps each (the first round's were counted as drawn);
      // a Jacobi window none.
      if (r > 0 && !windows) im.stats.draft_forwards += k;
      last_start = n;
      // The policy sees every round as the host loop's would: each later round's choice (the
      // held depth: burst_rounds kept the burst within the image's span, a cap away from its end),
      // then its outcome.
      if (loop_.policy) {
        if (r > 0)
          check(loop_.policy->choose_held(acceptance_[im.id], depth_cap_, hold_) == k,
                "internal: a burst's round past its image's held depth");
        loop_.policy->observe(acceptance_[im.id], k, carried, v.accepted, k, 0.0);
      }
      carried = windows && v.rejected ? k - v.accepted : 0;
      count_round(im, chain, k, committed);
    }
    // The caches as the device left them: the target's through the committed tokens but the last,
    // the draft model's as its last round left them.
    const int now = static_cast<int>(im.tokens.size());
    for (int h = 0; h < halves; ++h) {
      const int32_t slot = h == 0 ? im.slot : im.uncond_slot;
      session_.remove(slot, T + start - 1);
      session_.advance(std::span<const int32_t>(&slot, 1), now - start);
    }
    loop_.drafter->end_burst(im, last_start - start);
    // A Jacobi window carries over what the burst's last round left, as the host loop's
    // finish_round of that round: the draws of its rows past the rejection (the last refill's
    // first `carried` tokens), with those rows of its distributions as their q.
    if (windows) {
      std::vector<int32_t> draws(static_cast<size_t>(k), 0);
      for (int c = 0; c < carried; ++c)
        draws[static_cast<size_t>(k - carried + c)] =
            window[(static_cast<size_t>(j) * width + c) * kWindowWords + kWindowToken];
      TargetRound target;
      target.device_dist = &verifier_->distributions();
      target.device_row0 = static_cast<int64_t>(j) * rows;
      target.carried = draws;
      loop_.drafter->finish_round(im, chain, out, target);
    }
  }
  stats_.verify_seconds += now_s() - ts;
}

std::vector<std::vector<int32_t>> generate_speculative(
    const AutoregressiveModel& target, const std::vector<const Condition*>& conds,
    const std::vector<uint64_t>& image_indices, const SamplingParams& params, uint64_t seed,
    const LoopSettings& loop, const std::function<void(int64_t)>& on_tokens, GenerateStats& stats) {
  DecoderSettings s;
  s.sampling = params;
  s.seed = seed;
  s.on_tokens = on_tokens;
  SpeculativeDecoder decoder(target, static_cast<int>(conds.size()), s, loop, stats);
  return generate_all(decoder, conds, image_indices, stats);
}

}  // namespace tessera::speculative
