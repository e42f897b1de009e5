// Where an asynchronous upload stages its bytes: a fixed host buffer (pinned, on a GPU) used as a
// ring. A device backend copies the host's bytes into a region, queues the copy from there to the
// device and returns at once; the region may be written again only once that copy has run. Each
// region carries a completion slot (a CUDA event the backend records after the copy). This class
// is the host bookkeeping only, so the CPU tests check it (tests/test_staging_ring.cpp): no region
// handed out overlaps one whose copy may still be pending, and the number of slots in flight stays
// bounded. Copies on one stream complete in order, so waiting for the oldest slots first never
// waits longer than needed.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <optional>

namespace tessera {

class StagingRing {
 public:
  struct Region {
    size_t offset = 0;  // bytes into the buffer
    int slot = 0;       // completion slot, in [0, slots)
  };
  // A ring of `bytes` bytes with at most `slots` regions in flight; offsets aligned to `align`.
  StagingRing(size_t bytes, int slots, size_t align = 256);

  // A region for n bytes (n >= 1), after `wait(slot)` has returned for every earlier region it
  // overlaps and, when every slot is taken, for the oldest: the caller then writes it, queues its
  // copy and marks the slot. nullopt when n exceeds the ring (the caller copies synchronously).
  std::optional<Region> reserve(size_t n, const std::function<void(int slot)>& wait);
  // Regions handed out so far: a mark taken before waiting for the stream, so that
  // forget_before(mark) afterwards forgets only the regions whose copies that wait covered (another
  // thread may stage more in between).
  unsigned long long issued() const { return issued_; }
  void forget_before(unsigned long long mark) {
    while (!pending_.empty() && pending_.front().seq < mark) pending_.pop_front();
  }
  // Forgets every region (after the caller has waited for all its copies).
  void clear() { pending_.clear(); }

  size_t bytes() const { return bytes_; }
  int in_flight() const { return static_cast<int>(pending_.size()); }

 private:
  struct Pending {
    size_t begin, end;
    int slot;
    unsigned long long seq;  // issued_ when it was handed out
  };
  size_t bytes_, align_;
  int slots_;
  size_t head_ = 0;
  int next_slot_ = 0;
  unsigned long long issued_ = 0;
  std::deque<Pending> pending_;  // oldest first
};

}  // namespace tessera
