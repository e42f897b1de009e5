// Drafts with Hawk's spatial heads (Chen et al., 2025, "Hawk: Leveraging Spatial Context for
// Faster Autoregressive Text-to-Image Generation", §4.2; shared notes jacobi_grouped_spatial.md
// §3): no draft model runs. Each round, for the image whose last committed token (the root) is t:
//
// - Horizontal heads (Medusa's) on the hidden state of the row that predicted the root propose
//   tokens t + 1 .. t + K (HorizSpec, Eq. 4).
// - Vertical heads ran on the hidden state of the row that predicted each committed token (in the
//   next round's propose, every image's rows in one forward, or a few when the batch is large)
//   and left their proposals for the
//   tokens d rows below in the speculation cache (Eqs. 1-3); the cached proposals for t + j are
//   its vertical pool (VertSpec, Eq. 3).
// - Depth j's pool is the vertical proposals, nearest row first, then the horizontal one (Eq. 5);
//   each member contributes `samples` candidates drawn from its q. The tree is the Cartesian
//   product of the pools (every node of depth j - 1 has depth j's candidates as children), cut to
//   a static shape over pool slots: node rank r of depth j is slot r of depth j's pool (a slot the
//   pool lacks, e.g. the first row's missing vertical proposals, is left out with its subtree).
//
// Verification is the tree walk every method shares: siblings in order, each accepted with
// min(1, p_i/q_i) against its own q and the residual updated to norm(max(0, p_i - q_i)) after a
// rejection (Eq. 6, in the corrected form of notes §3.2 item 9: SpecInfer's multi-draft sampling,
// lossless since every candidate is drawn from the q it is tested against, independently of the
// target's draws). Nodes therefore carry their slot's full q (DraftNode::with_replacement), which
// is why the cache holds distributions, not tokens. Greedy decoding proposes each slot's argmax.
//
// Choices the paper leaves open (docs/methods.md, "hawk"): heads on both CFG halves, their logits
// guided as the target's (then the target's temperature, top-k and top-p), notes §3.2 item 6; one
// sample per pool member shared by every parent (the paper's Cartesian product of samples); the
// vertical heads run on every committed token's row (item 3).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "models/medusa_heads.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"
#include "speculative/drafters/feature_rows.h"
#include "speculative/drafters/head_rows.h"
#include "speculative/drafters/speculation_cache.h"
#include "speculative/hawk_options.h"
#include "speculative/tree_shape.h"

namespace tessera::speculative {

// Slots per depth of Hawk's pools (options resolved: no kAll): samples * (vertical +
// (horizontal > 0 ? 1 : 0)); the default tree is their Cartesian product down to the horizontal
// heads' depth (4 with vertical heads only), kary:s,s,...
std::string hawk_default_tree(const HawkOptions& o);

class HawkDrafter : public Drafter {
 public:
  // options: resolved (no kAll); n_tokens: the image's tokens. Each head kind runs for every
  // image in one forward a round (the workspace grows to the most rows seen): the horizontal heads
  // on the drafting images' roots, the vertical ones, at the next propose(), on the rows that
  // start() and finish_round() queued (in several forwards when their logits would outgrow
  // set_vertical_chunk_rows' bound).
  HawkDrafter(const MedusaHeads& heads, const SamplingParams& params, HawkOptions options,
              TreeShape shape, int n_tokens);
  std::string name() const override { return "Hawk heads"; }
  // min(L, the tree's depth).
  int draft_depth(int draft_len) const override;
  int max_nodes(int draft_len) const override;
  HiddenState hidden_state() const override { return HiddenState::PostNorm; }
  void start(std::span<ImageState* const> images, const TargetPrefill& prefill) override;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                    const TargetRound& target) override;
  void release(const ImageState& image) override {
    state_.erase(image.id);
    features_.erase(image.id);
    for (Queued& e : queued_)  // its queued rows still run (the forward's layout), uncached
      if (e.id == image.id) e.id = -1;
  }
  // --draft-len auto: each round keeps the nodes of the product whose values pay for their
  // verification (DraftLengthPolicy::choose_nodes).
  void set_node_budget(NodeBudget budget) override { budget_ = std::move(budget); }
  int64_t batched_forwards() const override { return forwards_; }
  // Sampled candidates (not --hawk-top's) are drawn where the heads' distributions are: the
  // speculation cache keeps its q rows there (always), and on the device loop a round's tokens
  // and q rows stay there for the walk; a host round reads them back.
  void set_device_drafts(bool on) override { device_drafts_ = on; }
  const DeviceDraftRows* device_rows() const override {
    return device_rows_.q.data ? &device_rows_ : nullptr;
  }
  DeviceDrafts device_drafts() const override { return device_drafts_counted_; }

  // The most queued rows (each half) one vertical forward takes: by default as many as keep its
  // logits within 64 MiB (at least one image's round); tests set fewer.
  void set_vertical_chunk_rows(int rows);
  // The heads' workspace: (head, feature row) pairs its forwards may hold (tests).
  int workspace_head_rows() const { return ws_.head_rows; }

  // The image's speculation cache (tests), and its proposal for `token` at `depth`: the q row,
  // read back from the heads' backend (empty when there is none).
  const SpeculationCache& cache(int image_id) const { return state_.at(image_id).cache; }
  std::vector<float> cached_q(int image_id, int token, int depth) const;

 private:
  struct State {
    SpeculationCache cache;
    Tensor rows;  // the cache's q rows, on the heads' backend ([capacity, V])
  };
  // An image's hidden-state rows queued for the vertical heads: k rows from queue row row0 on,
  // row r having predicted token first + r.
  struct Queued {
    int id, k, first, row0;
    SamplingParams sampling;
  };
  // Queues rows cond_rows of cond and, with CFG, uncond_rows of *uncond (backend tensors,
  // [rows, dim]) as the image's next entry (copied on the backend now: the tensors may be
  // rewritten before the heads run).
  void queue_vertical(const ImageState& image, int first, const Tensor& cond,
                      std::span<const int32_t> cond_rows, const Tensor* uncond,
                      std::span<const int32_t> uncond_rows);
  // The vertical heads on every queued row, in forwards of at most vertical_chunk_ rows (whole
  // entries), their proposals into the caches.
  void run_vertical_heads();
  // Queue entries e0..e1-1, R rows from entry e0's row0 on, in one forward.
  void run_vertical_chunk(size_t e0, size_t e1, int R);
  // The last head_distributions' rows of the vertical heads for entry e (of a forward over `rows`
  // feature rows from queue row row0 on, head d's row r at d rows + r) into s's cache rows.
  void cache_rows(State& s, const Queued& e, int rows, int row0);
  // Grows ws_ to hold forwards of `rows` feature rows and `head_rows` (head, row) pairs.
  void fit_workspace(int rows, int head_rows);
  // dst's rows pairs[n + i] = src's rows pairs[i] (n pairs), one Backend::copy_rows after one
  // small upload of the pairs.
  void copy_rows_to(const Tensor& src, Tensor& dst, std::span<const int32_t> pairs);
  // The budget's best nodes of `tree` (by value), in tree order.
  void keep_best(const ImageState& im, DraftTree& tree);
  // The guided distributions of heads first..first+count-1 for `rows` feature rows in the heads'
  // input, cond rows then (with CFG) as many uncond rows, left where they are (rows_'s
  // distributions(), head k's row r at k rows + r), the token index of row r and head k given by
  // token(r, k) and row r's sampling settings by sampling(r); a non-finite logit sets flag_.
  template <class TokenOf, class SamplingOf>
  void head_distributions(int rows, int first, int count, TokenOf token, SamplingOf sampling);
  const MedusaHeads& heads_;
  SamplingParams params_;
  HawkOptions opt_;
  TreeShape shape_;
  int n_tokens_;
  MedusaHeads::Workspace ws_;
  std::map<int, State> state_;  // by image id
  FeatureRows features_;        // the row that predicted each image's root, by image id
  HeadRows rows_;               // the heads' distributions, computed where their logits are
  std::vector<DeviceSampleParams> settings_;
  // The heads' error flag, gathered from every compute until a round reads it; a round's slot
  // rows (q), tokens (then the flag), draw settings, Σ q²; copy_rows_to's index.
  Tensor flag_, round_q_, tokens_, settings_up_, sums_, move_index_;
  // The vertical heads' queue: its entries and the rows they hold of each half.
  std::vector<Queued> queued_;
  Tensor queued_cond_, queued_uncond_;
  int queued_rows_ = 0;
  int vertical_chunk_ = 1;      // set_vertical_chunk_rows
  std::vector<int32_t> pairs_;  // copy_rows_to's pairs, reused
  std::vector<int> ids_;        // the images whose horizontal heads run this round
  std::vector<float> q_host_;   // a host round's slot rows
  bool device_drafts_ = false;
  DeviceDraftRows device_rows_;  // the last propose()'s, on the device loop
  DeviceDrafts device_drafts_counted_;
  int64_t forwards_ = 0;
  NodeBudget budget_;  // --draft-len auto (unset: every node of the product down to the depth)
};

}  // namespace tessera::speculative
