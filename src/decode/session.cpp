#include "decode/session.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <string>

#include "tessera/error.h"

namespace tessera {

namespace {
struct SessionSizes {
  int64_t slots, capacity, max_rows, max_out;
};
SessionSizes session_sizes(const AutoregressiveModel& model, const SessionOptions& o) {
  const ArModelInfo& m = model.info();
  const int64_t slots = std::max(o.n_slots, 1);
  const int64_t per_seq = std::max({m.prefix_len, o.max_new, 1});
  // With hidden states a prefill returns every prefix row.
  const int per_out = std::max(
      o.max_outputs_per_seq, o.hidden_states != HiddenState::None ? std::max(m.prefix_len, 1) : 1);
  return {slots, static_cast<int64_t>(m.prefix_len) + m.n_tokens + o.extra_capacity,
          slots * per_seq, slots * per_out};
}
std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(int64_t{1} << 30));
  return buf;
}
}  // namespace

const AutoregressiveModel& Session::fits_in_memory(const AutoregressiveModel& model,
                                                   const SessionOptions& o) {
  const ArModelInfo& m = model.info();
  const SessionSizes z = session_sizes(model, o);
  const double kv = 2.0 * m.n_layer * static_cast<double>(z.slots) * m.n_kv_head * z.capacity *
                    m.head_dim * sizeof(float);
  const bool addressable = z.max_rows <= std::numeric_limits<int>::max() / 4 &&
                           z.max_out <= std::numeric_limits<int>::max() / 4;
  const double work = addressable ? static_cast<double>(model.workspace_bytes(
                                        static_cast<int>(z.max_rows), static_cast<int>(z.max_out)))
                                  : 1e30;
  const double need = kv + work;
  const int64_t available = model.backend().available_memory();
  if (need > static_cast<double>(available))
    throw ParameterError("batch",
                         "not enough memory: " + std::to_string(z.slots) +
                             " sequences (images in flight, two per image with guidance) of " +
                             std::to_string(z.capacity) + " positions need " + gib(kv) +
                             " of KV cache and " + gib(work) + " of activations, but " +
                             gib(static_cast<double>(available)) + " is available; lower {batch}");
  return model;
}

Session::Session(const AutoregressiveModel& model, const SessionOptions& o)
    : model_(fits_in_memory(model, o)),
      cache_(model.backend(), model.info().n_layer, std::max(o.n_slots, 1),
             model.info().prefix_len + model.info().n_tokens + o.extra_capacity,
             model.info().n_kv_head, model.info().head_dim),
      in_use_(static_cast<size_t>(std::max(o.n_slots, 1)), 0),
      hidden_states_(o.hidden_states) {
  const SessionSizes z = session_sizes(model, o);
  const int max_rows = static_cast<int>(z.max_rows), max_out = static_cast<int>(z.max_out);
  workspace_ = model.make_workspace(max_rows, max_out);
  index_part_ = 3 * z.max_rows + 2 * z.slots + z.max_out;
  index_buffer_ = model.backend().empty(DType::I32, {kIndexParts * index_part_});
}

int Session::acquire_slot() {
  for (size_t s = 0; s < in_use_.size(); ++s)
    if (!in_use_[s]) {
      in_use_[s] = 1;
      cache_.clear(static_cast<int>(s));
      return static_cast<int>(s);
    }
  throw Error("session: all " + std::to_string(in_use_.size()) + " sequence slots are in use");
}

void Session::release_slot(int slot) {
  check(slot >= 0 && slot < n_slots() && in_use_[slot], "internal: releasing a free slot");
  in_use_[slot] = 0;
  cache_.clear(slot);
}

int Session::free_slots() const {
  return static_cast<int>(std::count(in_use_.begin(), in_use_.end(), 0));
}

ForwardOutputs Session::prefill(std::span<const Condition* const> conds, bool with_uncond,
                                std::span<const int32_t> slots) {
  const int T = model_.info().prefix_len;
  const size_t R = conds.size() * (with_uncond ? 2 : 1);
  check(slots.size() == R, "internal: prefill slots vs conditions");
  std::vector<uint8_t> hidden;
  const Tensor x = model_.embed_conditions(conds, with_uncond, hidden);
  for (size_t r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t)
      if (hidden[r * T + t]) cache_.set_key_visible(slots[r], t, false);
  StepBatch b;
  b.n_new = T;
  b.slots.assign(slots.begin(), slots.end());
  b.embeddings = &x;
  b.positions.resize(R * T);
  for (size_t r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) b.positions[r * T + t] = model_.prefix_position(t);
  b.output_at.resize(prefill_rows());
  for (int j = 0; j < prefill_rows(); ++j) b.output_at[j] = T - prefill_rows() + j;
  b.output_hidden = hidden_states_ != HiddenState::None;
  return forward(b);
}

int Session::prefill_rows() const {
  return hidden_states_ != HiddenState::None ? std::max(model_.info().prefix_len, 1) : 1;
}

ForwardOutputs Session::forward(const StepBatch& b) {
  return forward(b, {});
}

ForwardOutputs Session::forward(const StepBatch& b,
                                const std::function<void(ForwardInputs&)>& edit) {
  ForwardInputs in = prepare(b);
  if (edit) edit(in);
  ForwardOutputs out = run(in);
  advance(b.slots, b.n_new);
  forwards_++;
  return out;
}

void Session::add_to(GraphKey& key, const ForwardInputs& in) {
  key.add(in.attn.n_seq).add(in.attn.n_new).add(in.attn.mask_stride);
  for (const Tensor* t :
       {&in.tokens, &in.positions, &in.attn.seq, &in.attn.past, &in.output_rows, &in.attn.mask})
    key.add(*t);
  for (const Tensor* t : {in.embeddings, in.features, in.attn.key_visible})
    key.add(t ? *t : Tensor{});
  key.add(in.output_hidden).add(in.hidden_after_norm);
}

ForwardOutputs Session::run(const ForwardInputs& in) {
  return model_.forward(in, cache_, *workspace_);
}

void Session::advance(std::span<const int32_t> slots, int n) {
  for (const int32_t s : slots) {
    check(s >= 0 && s < n_slots() && in_use_[s], "internal: advancing a free slot");
    check(cache_.length(s) + n <= capacity(), "internal: advancing a slot past its capacity");
    cache_.set_length(s, cache_.length(s) + n);
  }
}

ForwardInputs Session::prepare(const StepBatch& b, int part) {
  Backend& be = backend();
  check(part >= 0 && part < kIndexParts, "internal: Session::prepare part out of range");
  const int n_seq = static_cast<int>(b.slots.size()), n_new = b.n_new;
  const int rows = n_seq * n_new, n_out = n_seq * static_cast<int>(b.output_at.size());
  check(n_seq <= n_slots() && rows <= workspace_->max_rows() && n_out <= workspace_->max_outputs(),
        "internal: a forward of " + std::to_string(rows) + " rows exceeds the session's workspace");
  check(static_cast<int>(b.positions.size()) == rows &&
            (b.embeddings || static_cast<int>(b.tokens.size()) == rows),
        "internal: forward inputs size");
  check(!b.output_hidden || hidden_states_ != HiddenState::None,
        "internal: session made without hidden states");
  const int fd = model_.info().feature_dim;
  check(static_cast<int64_t>(b.features.size()) ==
                (fd > 0 && !b.features_on_device ? int64_t{rows} * fd : 0) &&
            (fd > 0 || !b.features_on_device),
        "internal: forward features size");

  // Pack every index array into one host buffer and upload it in one transfer: tokens,
  // positions, sequence ids, past lengths, output rows, and a tree's parents.
  const bool tree = !b.parents.empty();
  const int parents_at = 2 * rows + 2 * n_seq + n_out;
  staging_.assign(static_cast<size_t>(parents_at + (tree ? rows : 0)), 0);
  int32_t* p = staging_.data();
  if (!b.embeddings) std::copy(b.tokens.begin(), b.tokens.end(), p);
  std::copy(b.positions.begin(), b.positions.end(), p + rows);
  for (int r = 0; r < n_seq; ++r) {
    const int s = b.slots[r];
    check(s >= 0 && s < n_slots() && in_use_[s], "internal: forward on a free slot");
    const int past = cache_.length(s);
    check(past + n_new <= capacity(), "KV cache: sequence " + std::to_string(s) + " would hold " +
                                          std::to_string(past + n_new) + " tokens, capacity " +
                                          std::to_string(capacity()));
    p[2 * rows + r] = s;
    p[2 * rows + n_seq + r] = past;
    for (size_t i = 0; i < b.output_at.size(); ++i) {
      const int j = b.output_at[i];
      check(j >= 0 && j < n_new, "internal: output index out of range");
      p[2 * rows + 2 * n_seq + r * static_cast<int>(b.output_at.size()) + static_cast<int>(i)] =
          r * n_new + j;
    }
  }
  if (tree) {
    check(b.mask.empty() && static_cast<int>(b.parents.size()) == rows,
          "internal: forward parents size");
    for (int r = 0; r < n_seq; ++r)
      for (int a = 0; a < n_new; ++a) {
        const int up = b.parents[static_cast<size_t>(r) * n_new + a];
        check(up >= -1 && up < a, "internal: a row's parent must come before it");
      }
    std::copy(b.parents.begin(), b.parents.end(), p + parents_at);
  }
  check(part == 0 || (!tree && b.mask.empty() && !b.mask_on_device && fd == 0),
        "internal: a second part of inputs with a mask or features");
  Tensor used = index_buffer_.rows(part * index_part_, static_cast<int64_t>(staging_.size()));
  be.upload_into(staging_.data(), used);

  ForwardInputs in;
  in.attn.n_seq = n_seq;
  in.attn.n_new = n_new;
  in.tokens = used.rows(0, rows);
  in.positions = used.rows(rows, rows);
  in.attn.seq = used.rows(2 * rows, n_seq);
  in.attn.past = used.rows(2 * rows + n_seq, n_seq);
  in.output_rows = used.rows(2 * rows + 2 * n_seq, n_out);
  in.embeddings = b.embeddings;
  in.output_hidden = b.output_hidden;
  in.hidden_after_norm = hidden_states_ == HiddenState::PostNorm;
  if (fd > 0) {
    if (!feature_buffer_.data)
      feature_buffer_ = be.empty(DType::F32, {static_cast<int64_t>(workspace_->max_rows()), fd});
    features_ = feature_buffer_.rows(0, rows);
    if (!b.features_on_device) be.upload_into(b.features.data(), features_);
    in.features = &features_;
  }
  check(!b.mask_on_device || (!tree && b.mask.empty()), "internal: a forward mask on the device");
  for (int r = 0; r < n_seq && b.mask_on_device; ++r)  // every row's past and its new rows fit
    check(b.mask_stride >= staging_[2 * rows + n_seq + r] + n_new,
          "internal: a forward mask on the device narrower than its rows");
  if (tree || !b.mask.empty() || b.mask_on_device) {
    // A tree's mask is expanded from its parents where the backend runs (rows ints cross to a
    // device, not rows x slots bytes); an explicit mask is uploaded as given.
    // A tree's stride is the capacity, the same every round, so that the forward's launch (and
    // a graph of it) does not change with the cached lengths.
    const int stride = tree ? capacity() : b.mask_stride;
    const int64_t size = static_cast<int64_t>(rows) * stride;
    check(tree || b.mask_on_device || static_cast<int64_t>(b.mask.size()) == size,
          "internal: forward mask size");
    const int64_t max_mask =
        static_cast<int64_t>(workspace_->max_rows()) * capacity();  // rows x slots of a sequence
    check(size <= max_mask, "internal: forward mask too large");
    if (!mask_buffer_.data) mask_buffer_ = be.empty(DType::U8, {max_mask});
    in.attn.mask = mask_buffer_.rows(0, size);
    in.attn.mask_stride = stride;
    if (tree) {
      const Tensor parents = used.rows(parents_at, rows);
      be.expand_tree_mask(parents, in.attn.past, n_new, stride, in.attn.mask);
    } else if (!b.mask_on_device) {
      be.upload_into(b.mask.data(), in.attn.mask);
    }
  }
  in.attn.key_visible = cache_.key_visible();
  return in;
}

void Session::read(const Tensor& t, std::vector<float>& host) {
  check(t.dtype == DType::F32, "internal: Session::read of a non-f32 tensor");
  host.resize(static_cast<size_t>(t.numel()));  // reused between steps: no allocation
  backend().download_async(t, host.data());
  backend().synchronize();
}

}  // namespace tessera
