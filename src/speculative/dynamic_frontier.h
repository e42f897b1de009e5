// EAGLE-2's dynamic tree (arXiv:2406.16858 §4.1-4.2; ModelDrafter::propose_dynamic) drafted where
// the draft logits are (issue 42, item 3): each image's candidates, its frontier, the next
// forward's inputs (tokens, feature rows, tree-mask rows) and the rerank's best candidates are
// kept in one backend buffer and written by the functions below, run in a loop on the CPU backend
// and by speculative/cuda/dynamic_frontier_kernels.cu on a GPU (a block per image, the same
// functions), so that a round reads back once: the best candidates, after the last expansion.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/host_device.h"
#include "tensor/backend.h"

namespace tessera::speculative {

// One candidate of an image's tree (plain data: bytes of a U8 backend tensor).
struct DynamicCandidate {
  int32_t token = 0;
  int32_t parent = -1;  // candidate index (in the best list: its index there); -1 = the root
  int32_t depth = 0;
  int32_t rank = 0;  // among its parent's children (descending q)
  int32_t fed = -1;  // its row among the round's tree rows once fed (cache tree_base + fed)
  int32_t unused = 0;
  double score = 0.0;  // the parent's score + log q(token)
};

// An image's running state; the first four words come back with the best list.
struct DynamicImage {
  int32_t best = 0;        // candidates in the best list (min(count, total))
  int32_t expansions = 0;  // ranked forwards that gave it candidates (its draft forwards)
  int32_t failed = 0;      // 1: a ranked row had a non-finite logit
  int32_t frontier = 0;    // frontier nodes (at most K), best first in the frontier array
  int32_t count = 0;       // candidates so far
  int32_t tree_base = 0;   // the draft cache's length before the round's tree rows (uploaded)
  int32_t max_depth = 0;   // its deepest draft this round (uploaded)
  int32_t unused = 0;
};

// Byte offsets of one round's buffer: images, then the best lists (these two come back in one
// download), then the frontiers (I32 [m, K]), the ranks' scratch (I32 [m, C]) and the candidates
// ([m, C]); C = K + (depth - 1) K^2, the most an image can have.
struct DynamicLayout {
  int m = 0, K = 0, C = 0, total = 0;
  int64_t images = 0, best = 0, frontier = 0, ranks = 0, candidates = 0, end = 0;
  int64_t download() const { return frontier; }  // bytes [0, download()) come back
};

DynamicLayout dynamic_layout(int m, int K, int depth, int total);

// The most candidates an image may have (DynamicLayout::C) for its tree to be drafted on the
// device: the rerank places each against every other, O(C^2) in a block. The defaults have 310
// (depth 4, top-k 10); beyond this the host ranks them.
inline constexpr int kMaxDeviceCandidates = 4096;

// Best first: the higher score, then the earlier candidate (a parent before its children, so a
// kept child's parent is kept even when log q = 0).
TESSERA_HD inline bool candidate_better(const DynamicCandidate* c, int a, int b) {
  return c[a].score > c[b].score || (c[a].score == c[b].score && a < b);
}

// How many of candidates [begin, end) are better than c: its place in their best-first order.
TESSERA_HD inline int candidate_place(const DynamicCandidate* c, int begin, int end, int x) {
  int place = 0;
  for (int y = begin; y < end; ++y) place += candidate_better(c, y, x) ? 1 : 0;
  return place;
}

// Appends as children of `parent` (-1: the root) the ranked ids of one row (K ids best first, -1
// past those with mass, and their mass): the candidates of depth `depth`, scored the parent's
// score + log q.
TESSERA_HD inline void add_children(DynamicImage& im, DynamicCandidate* c, int parent, int depth,
                                    const int32_t* ids, const float* mass, int K) {
  const double base = parent < 0 ? 0.0 : c[parent].score;
  for (int r = 0; r < K && ids[r] >= 0 && mass[r] > 0.0f; ++r) {
    DynamicCandidate& x = c[im.count++];
    x.token = ids[r];
    x.parent = parent;
    x.depth = depth;
    x.rank = r;
    x.fed = -1;
    x.unused = 0;
    x.score = base + log(static_cast<double>(mass[r]));
  }
}

// An expansion's candidates (depth `depth`), serial part: the root's children (ids, mass: its one
// ranked row) or every frontier node's (its frontier slot k's ranked row at k K). Returns the
// first new candidate; the frontier is chosen from [first, count) after (next_frontier). An image
// with an empty frontier (it stopped) adds none.
TESSERA_HD inline int expand_image(DynamicImage& im, DynamicCandidate* c, const int32_t* frontier,
                                   const int32_t* ids, const float* mass, int K, int depth,
                                   int32_t failed) {
  if (failed != 0) im.failed = 1;
  const int first = im.count;
  if (depth == 1) {
    add_children(im, c, -1, 1, ids, mass, K);
  } else {
    for (int k = 0; k < im.frontier; ++k)
      add_children(im, c, frontier[k], depth, ids + k * K, mass + k * K, K);
  }
  if (depth == 1 || im.frontier > 0) im.expansions++;
  return first;
}

// The next frontier, for candidate x of [first, count): the root's children are all of it, in
// their order (which is best first: ranks descend in q, ties to the earlier); a deeper expansion
// keeps its K best, best first. Each new candidate writes its own slot; the caller sets
// im.frontier to min(count - first, K) after.
TESSERA_HD inline void place_in_frontier(const DynamicImage& im, const DynamicCandidate* c,
                                         int32_t* frontier, int K, int depth, int first, int x) {
  const int place = depth == 1 ? x - first : candidate_place(c, first, im.count, x);
  if (place < K) frontier[place] = x;
}

// Feeding the frontier of depth d (the forward's rows k = 0..K-1 of each slot; row k past the
// frontier is a filler): image i's row k token, and the row of the last forward's outputs it reads
// f^ at (its parent's: the root's row `root_row` at depth 1, else the parent's frontier slot, its
// fed row - (tree_rows - K)), for both halves (slot rows h m + i); records each fed candidate's
// row. An image whose drafts stop at depth d (d >= max_depth) feeds fillers only. tokens and
// feature_rows: I32 [halves m K] (feature_rows may be null: a model without features).
TESSERA_HD inline void feed_image(DynamicImage& im, DynamicCandidate* c, const int32_t* frontier,
                                  int i, int m, int halves, int K, int d, int tree_rows,
                                  int prev_rows, int root_row, int32_t* tokens,
                                  int32_t* feature_rows) {
  if (d >= im.max_depth) im.frontier = 0;
  for (int k = 0; k < K; ++k) {
    const int x = k < im.frontier ? frontier[k] : -1;
    int32_t token = 0, from = 0;  // a filler: token 0, f^ of row 0
    if (x >= 0) {
      c[x].fed = tree_rows + k;
      token = c[x].token;
      const int parent = c[x].parent;
      from = parent < 0 ? root_row : c[parent].fed - (tree_rows - K);
    }
    for (int h = 0; h < halves; ++h) {
      const int r = h * m + i;
      tokens[r * K + k] = token;
      if (feature_rows) feature_rows[r * K + k] = x >= 0 ? r * prev_rows + from : 0;
    }
  }
}

// A fed row's tree mask (stride S): the committed tokens [0, tree_base) and nothing else, written
// over columns begin, begin + step, ... (a block's threads share the row) ...
TESSERA_HD inline void clear_mask_row(uint8_t* row, int S, int tree_base, int begin, int step) {
  for (int j = begin; j < S; j += step) row[j] = j < tree_base ? 1 : 0;
}

// ... then its own column (tree_base + tree_rows + k) and its fed ancestors' (EAGLE's tree mask):
// x is the frontier candidate fed at the row, -1 for a filler (itself only).
TESSERA_HD inline void mark_mask_path(uint8_t* row, const DynamicCandidate* c, int x, int tree_base,
                                      int own) {
  row[tree_base + own] = 1;
  for (int a = x >= 0 ? c[x].parent : -1; a >= 0; a = c[a].parent) row[tree_base + c[a].fed] = 1;
}

// The rerank's best list: candidate x's place among all (ranks[x], computed first), and, once
// every place is known, its copy at best[place] when place < total, its parent renumbered to the
// parent's place (a parent is better than its child, so it is in the list and before it).
TESSERA_HD inline void copy_to_best(const DynamicCandidate* c, const int32_t* ranks, int total,
                                    DynamicCandidate* best, int x) {
  const int place = ranks[x];
  if (place >= total) return;
  best[place] = c[x];
  best[place].parent = c[x].parent < 0 ? -1 : ranks[c[x].parent];
}

// Queued on the backend (a loop on the CPU, kernels on a GPU); no wait.
// The round's start: each image's tree_base and max_depth, its counts zeroed (one upload).
// expand: ids, mass (I32 / F32 [m rows_per_image, K], image i's rows from i rows_per_image),
// flag (I32 [1], the ranking's error flag): the candidates of depth `depth` and the next frontiers.
void expand_frontiers(Backend& be, Tensor& state, const DynamicLayout& L, const Tensor& ids,
                      const Tensor& mass, const Tensor& flag, int depth);
// feed: the frontier of depth d as the next forward's inputs: tokens (I32 [halves m K]),
// feature_rows (I32, same, or null) and mask (U8 [halves m K, stride]).
void feed_frontiers(Backend& be, Tensor& state, const DynamicLayout& L, int halves, int d,
                    int tree_rows, int prev_rows, Tensor& tokens, Tensor* feature_rows,
                    Tensor& mask, int stride);
// The best `total` candidates of each image, best first, into the best lists.
void best_candidates(Backend& be, Tensor& state, const DynamicLayout& L);

}  // namespace tessera::speculative
