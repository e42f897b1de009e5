#include "tensor/staging_ring.h"

#include "tessera/error.h"

namespace tessera {

StagingRing::StagingRing(size_t bytes, int slots, size_t align)
    : bytes_(bytes), align_(align), slots_(slots) {
  check(slots >= 1 && align >= 1, "internal: a staging ring without slots");
}

std::optional<StagingRing::Region> StagingRing::reserve(size_t n,
                                                        const std::function<void(int)>& wait) {
  check(n >= 1, "internal: an empty staging region");
  if (n > bytes_) return std::nullopt;
  // Contiguous: a region that would run past the end starts again at 0.
  const size_t at = head_ + n <= bytes_ ? head_ : 0;
  auto overlapped = [&] {
    for (const Pending& p : pending_)
      if (p.begin < at + n && at < p.end) return true;
    return false;
  };
  // Oldest first: the copies complete in queue order, so an overlapped region's wait also covers
  // every older one.
  while (!pending_.empty() && (static_cast<int>(pending_.size()) >= slots_ || overlapped())) {
    wait(pending_.front().slot);
    pending_.pop_front();
  }
  // Slots go round in order and leave in order, so with fewer than `slots_` in flight the next
  // one is free.
  const Region r{at, next_slot_};
  next_slot_ = (next_slot_ + 1) % slots_;
  pending_.push_back({at, at + n, r.slot, issued_++});
  head_ = (at + n + align_ - 1) / align_ * align_;
  if (head_ >= bytes_) head_ = 0;
  return r;
}

}  // namespace tessera
