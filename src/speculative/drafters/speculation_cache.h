// Hawk's speculation cache (Chen et al., 2025, "Hawk: Leveraging Spatial Context for Faster
// Autoregressive Text-to-Image Generation", §4.2, Eqs. 1-3; shared notes
// jacobi_grouped_spatial.md §3.2): a vertical head of depth d, run on the target's hidden state at
// the row that predicted image token i, proposes token i + d·W (W tokens per image row). Raster
// order reaches that token only d rows later, so the proposal waits here until then.
//
// What it keeps is the proposal's distribution q, not its token: Hawk verifies a cached proposal
// with min(1, p/q) and subtracts q from the residual after a rejection (Eq. 6), which needs q
// (notes §3.2 item 4; a cache of token ids could not be verified losslessly).
//
// For an image whose next token is t, the entries for token P are those of depths d with
// P - d·W < t (made at a committed row): Eq. 3's VertSpec(P) = {Cache(P, d) : d = 1..D}, the
// depth-d one made d rows up. Entries for tokens before t are evicted; at most W·D(D+1)/2 remain
// (Eq. 2), which the class checks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::speculative {

class SpeculationCache {
 public:
  // row_width: W, image tokens per row; depths: D, the vertical heads' depths 1..D; vocab: the
  // size of each q.
  SpeculationCache(int row_width, int depths, int vocab);

  int row_width() const { return row_width_; }
  int depths() const { return depths_; }
  // Eq. 2: W·D(D+1)/2.
  int64_t capacity() const;
  int64_t size() const { return static_cast<int64_t>(entries_.size()); }

  // The depth-d proposal made at the row that predicted image token `from`: q for token
  // from + d·W (dropped when that token is committed already, a round having accepted past it, or
  // past the image's `n_tokens`). Throws on a second entry for the same (token, depth) or a depth
  // outside 1..D.
  void put(int from, int depth, std::span<const float> q, int n_tokens);
  // The same entry with q kept elsewhere (Hawk's device loop: rows of a backend tensor of
  // capacity() rows): returns the row it takes, in [0, capacity()), or -1 when it is dropped. A
  // row is reused once its entry is evicted.
  int put_row(int from, int depth, int n_tokens);

  // Eq. 3's vertical pool of `token`: its entries by ascending depth (the nearest row first).
  struct Entry {
    int token = 0, depth = 0;  // the proposed token's index, and the head's depth
    std::span<const float> q;  // valid until the next put or evict (empty: put_row's entry)
    int row = 0;               // its row (put_row's)
  };
  std::vector<Entry> pool(int token) const;

  // The image's next token is `next`: entries for earlier tokens can no longer be used.
  void evict_before(int next);
  void clear();

 private:
  struct Slot {
    int token, depth;
    int row;  // its row (of qs_ for put's entries)
  };
  int row_width_, depths_, vocab_;
  int next_ = 0;               // the image's next token (evict_before)
  std::vector<Slot> entries_;  // sorted by (token, depth)
  std::vector<float> qs_;      // put's entries' distributions, vocab_ floats a row
  std::vector<int> free_;      // rows of evicted entries
  int rows_ = 0;               // rows ever taken (the rest are free_'s)
};

}  // namespace tessera::speculative
