// The asynchronous uploads' staging ring (src/tensor/staging_ring.h): the bookkeeping a device
// backend relies on to return from an upload before its copy has run.
#include <gtest/gtest.h>

#include <deque>
#include <random>

#include "tensor/staging_ring.h"

namespace tessera {
namespace {

// Copies in flight as a stream runs them: in queue order. Waiting on a slot whose copy already ran
// returns at once (a completed event); on one in flight it completes that copy, which must be the
// oldest (a later one would wait longer than needed).
struct Stream {
  struct Copy {
    size_t begin, end;
    int slot;
  };
  std::deque<Copy> queued;  // oldest first
  int waits = 0;
  void wait(int slot) {
    ++waits;
    for (size_t i = 1; i < queued.size(); ++i)
      EXPECT_NE(queued[i].slot, slot) << "a wait on a copy behind older ones";
    if (!queued.empty() && queued.front().slot == slot) queued.pop_front();
  }
};

TEST(StagingRing, RegionsNeverOverlapACopyStillInFlight) {
  std::mt19937 rng(7);
  for (const auto& [bytes, slots] :
       {std::pair{size_t{4096}, 8}, {size_t{1000}, 3}, {size_t{2048}, 64}}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes, " + std::to_string(slots) + " slots");
    StagingRing ring(bytes, slots);
    Stream stream;
    int wraps = 0;
    size_t last = 0;
    for (int i = 0; i < 5000; ++i) {
      const size_t n = 1 + rng() % (bytes / 2 + 1);
      // Now and then the stream catches up by itself (the device ran ahead).
      if (rng() % 5 == 0 && !stream.queued.empty()) stream.queued.pop_front();
      const auto r = ring.reserve(n, [&](int slot) { stream.wait(slot); });
      if (n > bytes) {
        EXPECT_FALSE(r);
        continue;
      }
      ASSERT_TRUE(r);
      EXPECT_LE(r->offset + n, bytes);
      EXPECT_EQ(r->offset % 256, 0u);
      EXPECT_GE(r->slot, 0);
      EXPECT_LT(r->slot, slots);
      for (const Stream::Copy& c : stream.queued) {
        EXPECT_FALSE(c.begin < r->offset + n && r->offset < c.end)
            << "region [" << r->offset << ", " << r->offset + n << ") over a copy in flight ["
            << c.begin << ", " << c.end << ")";
        EXPECT_NE(c.slot, r->slot) << "a slot still in flight handed out again";
      }
      stream.queued.push_back({r->offset, r->offset + n, r->slot});
      EXPECT_LE(static_cast<int>(stream.queued.size()), slots);
      EXPECT_LE(ring.in_flight(), slots);
      wraps += r->offset < last;
      last = r->offset;
    }
    EXPECT_GT(wraps, 100);
    EXPECT_GT(stream.waits, 100);
  }
}

// A ring with room waits for nothing: small uploads queue back to back without a sync.
TEST(StagingRing, WaitsOnlyWhenItMust) {
  StagingRing ring(4096, 8);
  int waits = 0;
  auto wait = [&](int) { ++waits; };
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(ring.reserve(300, wait));
  EXPECT_EQ(waits, 0);
  EXPECT_EQ(ring.in_flight(), 8);
  ASSERT_TRUE(ring.reserve(10, wait));  // a ninth in flight: the oldest slot is reused
  EXPECT_EQ(waits, 1);
  EXPECT_FALSE(ring.reserve(4097, wait));  // larger than the ring: copied synchronously
  ring.clear();
  EXPECT_EQ(ring.in_flight(), 0);
  waits = 0;
  ASSERT_TRUE(ring.reserve(4096, wait));  // the whole ring, nothing in flight
  EXPECT_EQ(waits, 0);
}

// A synchronize() forgets the regions staged before its wait, never one another thread staged
// while it waited (its copy may still be pending): forget_before(the mark taken before the wait).
TEST(StagingRing, ForgetsOnlyTheRegionsBeforeTheMark) {
  StagingRing ring(4096, 8);
  int waits = 0;
  auto wait = [&](int) { ++waits; };
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(ring.reserve(300, wait));
  const unsigned long long mark = ring.issued();
  const auto late = ring.reserve(300, wait);  // staged during the wait
  ASSERT_TRUE(late);
  ring.forget_before(mark);
  EXPECT_EQ(ring.in_flight(), 1);
  // The late region is still protected: a region that would overlap it waits for its slot.
  for (int i = 0; i < 20 && waits == 0; ++i) ASSERT_TRUE(ring.reserve(300, wait));
  EXPECT_EQ(waits, 1);
  ring.forget_before(ring.issued());
  EXPECT_EQ(ring.in_flight(), 0);
}

}  // namespace
}  // namespace tessera
