// Drafts with a smaller autoregressive model over the same vocabulary (classic speculative
// decoding, Leviathan et al. 2023 / Chen et al. 2023; COOL-SD Alg. 1 line 2): a chain of L tokens,
// each drawn from the draft model's distribution after the same CFG, temperature, top-k and top-p
// as the target's. The draft model runs both CFG halves like the target, in its own session.
//
// With a TreeShape (speculative/tree_shape.h) it drafts a static tree instead, as EAGLE-1's
// topK_genrate_v1 does: one draft forward per depth over all nodes of that depth (tree attention
// mask, positions by depth), each node's children being the shape's ranks of the draft
// distribution at that node (see propose_tree). The draft KV then keeps the accepted path
// (finish_round compacts it). Without a shape, or with a chain shape, the drafts are the chain's.
// With a DynamicTree (speculative/tree_spec.h) it drafts EAGLE-2's dynamic tree: the frontier of
// the most confident nodes is expanded one forward per depth, the best `total` nodes by
// cumulative draft log-probability are kept (see propose_dynamic).
//
// A model that reads features (ArModelInfo::feature_dim > 0: EAGLE, models/eagle_drafter.h) drafts
// from the target's hidden states: every committed token x is fed as the pair (f, x), f the
// target's feature at the row that predicted x (the prefill's rows for the prefix, each round's
// verified rows after it), and every drafted node as (f^, x~), f^ the drafter's own prediction at
// the row its token was drawn from (EAGLE §3.1). Its cache keeps only the pairs with the target's
// features (EAGLE-2's stable_kv): a round's draft rows are dropped before the next catch-up, which
// feeds the round's committed pairs.
#pragma once

#include <map>
#include <memory>
#include <optional>

#include "decode/session.h"
#include "sampling/sampler.h"
#include "speculative/drafters/drafter.h"
#include "speculative/drafters/head_rows.h"
#include "speculative/drafters/pending_features.h"
#include "speculative/dynamic_frontier.h"
#include "speculative/tree_spec.h"

namespace tessera::speculative {

// What a model that reads features reads (ModelDrafter's feature mode).
struct FeatureInputs {
  HiddenState feature = HiddenState::None;  // the target's hidden state it reads
  int32_t prefix_token = 0;                 // the token paired with the target's prefix features
};

// The key of the device draft chain's captured graph for `images` images drafting `depth` tokens
// (a chain's depth is at most the image's n_tokens - 1: --draft-len is not bounded by a tree's
// depth), with or without the key-visibility table: distinct shapes never share a key.
int device_chain_graph_key(int images, int depth, bool key_visible, int n_tokens);

class ModelDrafter : public Drafter {
 public:
  // max_images: images in flight at once (the session's slots). tree: draft this static or
  // dynamic tree (cut at the round's depth) instead of a chain. features: required when the model
  // reads them.
  ModelDrafter(const AutoregressiveModel& model, const SamplingParams& params, int max_depth,
               int max_images, std::optional<TreeSpec> tree = std::nullopt,
               FeatureInputs features = {});
  std::string name() const override { return reads_features() ? "EAGLE drafter" : "draft model"; }
  int draft_depth(int draft_len) const override { return draft_len; }
  // With a shape: its nodes down to the round's depth (the target's session is sized by this).
  int max_nodes(int draft_len) const override;
  HiddenState hidden_state() const override;
  void start(std::span<ImageState* const> images, const TargetPrefill& prefill) override;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<DraftTree>& trees) override;
  void finish_round(ImageState& image, const DraftTree& tree, const VerifyOutcome& outcome,
                    const TargetRound& target) override;
  void release(const ImageState& image) override;
  int64_t batched_forwards() const override { return session_.forwards() + device_forwards_; }
  bool can_burst() const override;
  bool burst_fields(std::vector<RoundField>& out) const override;
  void replay_burst_round() override;
  void end_burst(const ImageState& image, int tokens) override;
  void set_node_budget(NodeBudget budget) override { budget_ = std::move(budget); }
  // Chains (of a draft model or an EAGLE drafter) are drawn where the logits are; dynamic trees
  // rank their candidates there (rank_on_backend).
  void set_device_drafts(bool on) override { device_drafts_ = on; }
  const DeviceDraftRows* device_rows() const override {
    return device_rows_.q.data ? &device_rows_ : nullptr;
  }
  DeviceDrafts device_drafts() const override { return device_drafts_counted_; }

 private:
  NodeBudget budget_;  // dynamic trees under --draft-len auto (unset: the tree's total)
  struct Slots {
    int cond = -1, uncond = -1;
    // Feature mode: pairs in the cache (all with the target's features), and the committed pairs
    // not fed yet (tokens; their features in pending_, on the backend).
    int fed = 0;
    std::vector<int32_t> pending;
    // Tree drafting: the cache length before the round's tree rows, and the cache position of
    // each node of the last DraftTree (-1: not fed, a leaf).
    int tree_base = -1;
    std::vector<int> fed_at;
  };
  void propose_tree(std::span<ImageState* const> active, std::span<const int> max_depth,
                    std::vector<DraftTree>& trees);
  void propose_dynamic(std::span<ImageState* const> active, std::span<const int> max_depth,
                       std::vector<DraftTree>& trees);
  // A dynamic tree's catch-up and expansions, each image's candidates into cand[i] (on the
  // device: its best `total`, best first, parents renumbered), their fed rows recorded.
  void expand_dynamic_on_host(std::span<ImageState* const> active, const std::vector<int>& who,
                              std::span<const int> max_depth, int depth,
                              std::vector<std::vector<DynamicCandidate>>& cand);
  void expand_dynamic_on_device(std::span<ImageState* const> active, const std::vector<int>& who,
                                std::span<const int> max_depth, int depth,
                                std::vector<std::vector<DynamicCandidate>>& cand);
  void start_tree(std::span<ImageState* const> active, const std::vector<int>& who);
  // A static tree's children on the device loop: of each row of the last forward (last_, n_out
  // rows a slot, image i's root at out_row[i] at depth 1, fed node rows_of[k] at row k after),
  // the shape's children drawn without replacement where the logits are (draw_children_rows,
  // the host tree's uniforms), their q rows left in device_q_ and their tokens in tree_tokens_
  // (as inputs in tree_inputs_) for the next depth's forward, the target pass and the walk.
  // Nothing comes back: the tokens reach the host with the verdicts.
  struct TreeChildren {
    int k = 1;               // children a row at most (the shape's widest node)
    int64_t used = 0;        // device_q_ rows written this round
    int64_t p_base = 0;      // greedy: the last depth's P rows (child 0's q)
    int64_t q_base = 0;      // the last depth's children's q rows, row r's c-th at r k + c
    int64_t slots = 0;       // token rows of the round (every depth's rows, k each)
    int64_t drawn = 0;       // token rows written this round
    int64_t token_base = 0;  // the last depth's children's token rows, row r's c-th at r k + c
  };
  void draw_tree_children(std::span<ImageState* const> active, const std::vector<int>& who, int d,
                          int n_out, const std::vector<int>& out_row,
                          const std::vector<int>& rows_of, const std::vector<int>& index_in_depth,
                          TreeChildren& drawn);
  void tree_batch(std::span<ImageState* const> active, const std::vector<int>& who,
                  const std::vector<DraftTree>& trees, const std::vector<std::vector<int>>& nodes,
                  int d, const std::vector<int>& out_row, int n_out, int& tree_rows, bool masked,
                  std::vector<std::vector<int>>& output_row, StepBatch& b);
  bool reads_features() const { return features_.feature != HiddenState::None; }
  // Brings the cache of the images `who` up to their committed tokens and runs the forward whose
  // outputs give every image's root distribution: logits_ (or last_) of n_out rows per slot,
  // image i's at row out_row[i]. Leaves b's slots set (cond, then uncond). Returns n_out.
  // keep_on_device: leave the logits on the backend (last_), not in logits_.
  int catch_up(std::span<ImageState* const> active, const std::vector<int>& who, StepBatch& b,
               std::vector<int>& out_row, bool keep_on_device = false);
  int catch_up_features(std::span<ImageState* const> active, const std::vector<int>& who,
                        StepBatch& b, std::vector<int>& out_row, bool keep_on_device);
  // Runs b; reads the logits to the host unless not `read_logits` (they stay in last_). In
  // feature mode b's features are gathered on the backend: row k's from row feature_rows_[k] of
  // feature_from_ (the pending features' table, or the last forward's hidden outputs, f^).
  // token_moves (n sources, then n destinations): the inputs' token row to[k] is written on the
  // backend from row from[k] of tree_inputs_ (a static tree's tokens drawn there).
  void run(const StepBatch& b, bool read_logits = true, std::span<const int32_t> token_moves = {});
  // EAGLE-2's candidates where the logits are (ranking_): the K most likely tokens with their
  // mass of each of the n_out rows per slot of the last forward (last_), image i's rows scored
  // with its sampling at the token index of depth d (at temperature 1 when greedy); row k of
  // image i at [(i n_out + k) K, ...) of the ids and masses, left there.
  HeadRows::Ranked rank_on_backend(std::span<ImageState* const> active, const std::vector<int>& who,
                                   int n_out, int d, int K);
  // The device loop, after the catch-up (n_out rows a slot in last_, image i's root at
  // out_row[i]): when it gave a slot several rows (images catching up unevenly, an EAGLE catch-up
  // feeding several pairs) or the model reads features, the roots' rows gathered to one a slot
  // (device_roots_; f^ in device_roots_hidden_, an address the chain's graphs keep) and made
  // last_, so that the drafts compute m rows, not m n_out. Returns the rows a slot now; out_row
  // is updated.
  int keep_roots(int m, int n_out, std::vector<int>& out_row);
  // The device loop's chain for the images `who` after the catch-up and keep_roots (last_ holds
  // the roots' outputs, one row a slot of `slots`): depth draws and the forwards
  // between them on the backend (an EAGLE drafter's reading f^ there), the distributions and
  // tokens in device_rows_ (node (step, i) at row step * m + i), left there; appends the nodes to
  // `trees`, their tokens kTokenOnDevice.
  // A deferred catch-up (deferred_) runs first in the chain's graph, its roots at out_row.
  void draft_on_device(std::span<ImageState* const> active, const std::vector<int>& who,
                       std::span<const int> max_depth, int depth, const std::vector<int32_t>& slots,
                       const std::vector<int>& out_row, std::vector<DraftTree>& trees);
  // Uploads the index of the roots' rows of a catch-up of n_out rows a slot (cond, then uncond).
  Tensor upload_roots_index(int m, int n_out, const std::vector<int>& out_row);
  // Feature mode: appends the pairs (tokens[k], features of row cond_rows[k] of cond and
  // uncond_rows[k] of uncond, backend tensors [*, feature_dim]) to image id's pending ones.
  void queue_pairs(int id, std::span<const int32_t> tokens, const Tensor& cond,
                   std::span<const int64_t> cond_rows, const Tensor* uncond,
                   std::span<const int64_t> uncond_rows);
  const AutoregressiveModel& model_;
  SamplingParams params_;
  Session session_;
  std::map<int, Slots> slots_;  // by image id
  std::vector<float> logits_;
  std::optional<PendingFeatures> pending_;  // feature mode
  Tensor feature_from_, feature_index_;     // the next forward's feature rows (run), on the backend
  std::vector<int32_t> feature_rows_;
  std::optional<TreeShape> shape_;
  std::optional<DynamicTree> dynamic_;
  std::vector<std::vector<int>> children_;  // shape node -> its children (index nodes: the root)
  FeatureInputs features_;
  bool consecutive_positions_;  // a burst's commit moves positions by the tokens committed
  int max_new_ = 2;             // most rows per slot of one forward
  bool device_drafts_ = false;
  ForwardOutputs last_;  // the last forward's outputs
  // The device loop's chains of a draft model that reads no features: run() then prepares the
  // catch-up (Session::prepare's part 1) and advances its cache lengths without running it, and
  // draft_on_device runs its forward first in the chain's graph.
  struct DeferredCatchUp {
    bool pending = false;
    ForwardInputs in;
    int n_out = 0;
  };
  bool defer_catch_up_ = false;
  DeferredCatchUp deferred_;
  // The last device chain, for a burst to run again (replay_burst_round) and to list the words
  // its commit moves (burst_fields): its graph's key and ops, its inputs, its io's layout.
  struct DeviceChain {
    bool burstable = false;  // every image's chain, after an even catch-up run in the graph
    GraphKey key;
    std::function<void()> ops;
    ForwardInputs in, catch_up_in;
    size_t params_at = 0, positions_at = 0;
    int m = 0, depth = 0;
  };
  DeviceChain chain_;
  // The device loop: the round's draft distributions [depth * m, V], and one byte buffer holding
  // the tokens drawn ([depth, m], then the non-finite flag), every step's row settings and every
  // forward's positions; the chain's forwards as graphs by (m, depth, key visibility).
  Tensor device_q_, device_io_;
  Tensor device_roots_, device_roots_hidden_, roots_index_;
  std::vector<int32_t> roots_host_;
  // Static trees: each depth's settings (up), the rows drawn from, the round's tokens (then the
  // flag) and the same as inputs, the next forward's token moves (up).
  Tensor tree_io_, tree_p_, tree_tokens_, tree_inputs_, move_index_;
  std::vector<uint8_t> tree_host_;
  std::vector<int32_t> move_host_;
  DeviceDraftRows device_rows_;  // views of the last chain's rows of both
  std::vector<uint8_t> io_host_;
  GraphCache graphs_;
  // Dynamic trees: candidates ranked where the logits are, when the backend computes rows of this
  // vocabulary (any on the CPU; on a GPU up to kMaxDeviceSampleVocab, else on the host).
  std::optional<HeadRows> ranking_;
  std::vector<DeviceSampleParams> rank_settings_;
  // The device loop's dynamic trees: the round's candidates and frontiers (dynamic_frontier.h),
  // each feed's f^ rows, and the host side of the round's one upload and one download.
  Tensor dynamic_state_, dynamic_feature_rows_;
  std::vector<uint8_t> dynamic_host_;
  int64_t device_forwards_ = 0;  // forwards run from prepared inputs (not counted by the session)
  DeviceDrafts device_drafts_counted_;
};

}  // namespace tessera::speculative
