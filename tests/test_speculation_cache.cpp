// Hawk's speculation cache (speculative/drafters/speculation_cache.h; Hawk §4.2, Eqs. 2-3): a
// vertical proposal waits for its token, the pool of a token holds the proposal of each depth d
// made d rows up (the nearest row first), and the cache never holds more than W·D(D+1)/2.
#include <gtest/gtest.h>

#include <map>

#include <random>

#include "speculative/drafters/speculation_cache.h"
#include "tessera/error.h"

using tessera::speculative::SpeculationCache;

namespace {

// A distribution that names where it was made: q[0] = the row's token, q[1] = the depth.
std::vector<float> marker(int from, int depth, int vocab) {
  std::vector<float> q(vocab, 0.0f);
  q[0] = static_cast<float>(from);
  q[1] = static_cast<float>(depth);
  return q;
}

// Raster decoding of an n-token image in rounds that commit 1..5 tokens: after each round the
// cache drops the tokens before the next one and takes the vertical proposals of every row that
// predicted a committed token. Every token's pool must then be exactly the depths whose row is
// committed, each made d rows up.
TEST(SpeculationCache, PoolIsTheProposalMadeDRowsUp) {
  const int W = 4, D = 2, V = 8, N = 40;
  SpeculationCache cache(W, D, V);
  EXPECT_EQ(cache.capacity(), W * D * (D + 1) / 2);
  std::mt19937 rng(7);
  int next = 0, full = 0;
  while (next < N) {
    const int k = std::min(N - next, 1 + static_cast<int>(rng() % 5));
    cache.evict_before(next + k);
    for (int from = next; from < next + k; ++from)  // the rows that predicted the new tokens
      for (int d = 1; d <= D; ++d) cache.put(from, d, marker(from, d, V), N);
    next += k;
    EXPECT_LE(cache.size(), cache.capacity());
    full += cache.size() == cache.capacity();
    for (int P = next; P < std::min(N, next + D * W + 1); ++P) {
      SCOPED_TRACE("next " + std::to_string(next) + " token " + std::to_string(P));
      const auto pool = cache.pool(P);
      std::vector<int> want;  // the depths whose row is committed (the first row has none above)
      for (int d = 1; d <= D; ++d)
        if (P - d * W >= 0 && P - d * W < next) want.push_back(d);
      ASSERT_EQ(pool.size(), want.size());
      for (size_t i = 0; i < pool.size(); ++i) {
        EXPECT_EQ(pool[i].token, P);
        EXPECT_EQ(pool[i].depth, want[i]);
        EXPECT_EQ(pool[i].q[0], static_cast<float>(P - pool[i].depth * W)) << "made d rows up";
        EXPECT_EQ(pool[i].q[1], static_cast<float>(pool[i].depth));
      }
    }
  }
  EXPECT_GT(full, 3);  // Eq. 2's bound is reached, not only respected
}

TEST(SpeculationCache, RefusesWhatHawkCannotHold) {
  SpeculationCache cache(4, 2, 3);
  const std::vector<float> q = {0.5f, 0.25f, 0.25f};
  cache.put(0, 1, q, 16);
  EXPECT_THROW(cache.put(0, 1, q, 16), tessera::Error);  // the same token and depth
  EXPECT_THROW(cache.put(0, 3, q, 16), tessera::Error);  // a depth it has no head for
  const std::vector<float> short_q = {0.5f, 0.5f};
  EXPECT_THROW(cache.put(1, 1, short_q, 16), tessera::Error);  // another vocabulary
  cache.put(13, 1, q, 16);                                     // past the image: dropped
  EXPECT_EQ(cache.size(), 1);
  // A caller that never evicts overflows Eq. 2's bound (12 here) and is told so.
  EXPECT_THROW(
      {
        for (int from = 1; from < 12; ++from)
          for (int d = 1; d <= 2; ++d) cache.put(from, d, q, 1000);
      },
      tessera::Error);
  cache.clear();
  EXPECT_EQ(cache.size(), 0);
  EXPECT_TRUE(cache.pool(4).empty());
}

// Hawk's device loop keeps the q rows on the backend: put_row hands out rows of a tensor of
// capacity() rows, one an entry, each freed by eviction and taken again; the pool names them.
TEST(SpeculationCache, RowsStayWithinTheCapacityAndAreReused) {
  const int W = 4, D = 2, N = 64;
  SpeculationCache cache(W, D, 3);
  std::map<std::pair<int, int>, int> row_of;  // (token, depth) -> row
  for (int from = 0; from + 1 < N; ++from) {
    // As Hawk's finish_round: the row predicting token `from` runs once `from` is committed.
    const int next = from + 1;
    cache.evict_before(next);
    for (auto it = row_of.begin(); it != row_of.end();)
      it = it->first.first < next ? row_of.erase(it) : std::next(it);
    for (int d = 1; d <= D; ++d) {
      const int row = cache.put_row(from, d, N);
      if (from + d * W >= N) {
        EXPECT_EQ(row, -1) << "past the image";
        continue;
      }
      ASSERT_GE(row, 0);
      EXPECT_LT(row, cache.capacity());
      for (const auto& [key, taken] : row_of) EXPECT_NE(taken, row) << "a row held twice";
      row_of[{from + d * W, d}] = row;
    }
    for (const auto& [key, row] : row_of) {
      int found = 0;
      for (const SpeculationCache::Entry& e : cache.pool(key.first))
        if (e.depth == key.second) {
          ++found;
          EXPECT_EQ(e.row, row);
          EXPECT_TRUE(e.q.empty()) << "put_row keeps no q";
        }
      EXPECT_EQ(found, 1) << "token " << key.first << " depth " << key.second;
    }
  }
  EXPECT_EQ(cache.size(), static_cast<int64_t>(row_of.size()));
}

}  // namespace
