#include "speculative/drafters/speculation_cache.h"

#include <algorithm>
#include <string>

#include "tessera/error.h"

namespace tessera::speculative {

SpeculationCache::SpeculationCache(int row_width, int depths, int vocab)
    : row_width_(row_width), depths_(depths), vocab_(vocab) {
  check(row_width >= 1 && depths >= 0 && vocab >= 1,
        "internal: a speculation cache needs a row width, depths and a vocabulary");
}

int64_t SpeculationCache::capacity() const {
  return static_cast<int64_t>(row_width_) * depths_ * (depths_ + 1) / 2;
}

void SpeculationCache::put(int from, int depth, std::span<const float> q, int n_tokens) {
  check(static_cast<int>(q.size()) == vocab_,
        "internal: a vertical proposal over " + std::to_string(q.size()) +
            " tokens for a cache of " + std::to_string(vocab_));
  const int row = put_row(from, depth, n_tokens);
  if (row < 0) return;
  const size_t at = static_cast<size_t>(row) * vocab_;
  if (qs_.size() < at + vocab_) qs_.resize(at + vocab_);
  std::copy(q.begin(), q.end(), qs_.begin() + static_cast<std::ptrdiff_t>(at));
}

int SpeculationCache::put_row(int from, int depth, int n_tokens) {
  check(depth >= 1 && depth <= depths_, "internal: a vertical proposal of depth " +
                                            std::to_string(depth) + " for a cache of " +
                                            std::to_string(depths_));
  const int token = from + depth * row_width_;
  if (token >= n_tokens || token < next_) return -1;
  auto key = [](const Slot& s) { return std::pair(s.token, s.depth); };
  const auto it =
      std::lower_bound(entries_.begin(), entries_.end(), std::pair(token, depth),
                       [&](const Slot& s, const std::pair<int, int>& k) { return key(s) < k; });
  check(it == entries_.end() || key(*it) != std::pair(token, depth),
        "internal: token " + std::to_string(token) + " already has a depth-" +
            std::to_string(depth) + " vertical proposal");
  // Eq. 2: the rows that can still be reached hold at most W·D(D+1)/2 proposals; more means an
  // entry outlived its token (a caller that did not evict). Rows are reused, so every row stays
  // below that bound too.
  check(size() < capacity(),
        "internal: the speculation cache holds " + std::to_string(size() + 1) +
            " proposals, more than Hawk's W·D(D+1)/2 = " + std::to_string(capacity()));
  int row;
  if (!free_.empty()) {
    row = free_.back();
    free_.pop_back();
  } else {
    row = rows_++;
  }
  entries_.insert(it, Slot{token, depth, row});
  return row;
}

std::vector<SpeculationCache::Entry> SpeculationCache::pool(int token) const {
  std::vector<Entry> out;
  auto it = std::lower_bound(entries_.begin(), entries_.end(), token,
                             [](const Slot& s, int t) { return s.token < t; });
  for (; it != entries_.end() && it->token == token; ++it)
    out.push_back({it->token, it->depth,
                   static_cast<size_t>(it->row + 1) * vocab_ <= qs_.size()
                       ? std::span<const float>(qs_.data() + static_cast<size_t>(it->row) * vocab_,
                                                static_cast<size_t>(vocab_))
                       : std::span<const float>(),
                   it->row});
  return out;
}

void SpeculationCache::evict_before(int next) {
  next_ = std::max(next_, next);
  auto end = std::lower_bound(entries_.begin(), entries_.end(), next,
                              [](const Slot& s, int t) { return s.token < t; });
  for (auto it = entries_.begin(); it != end; ++it) free_.push_back(it->row);
  entries_.erase(entries_.begin(), end);
}

void SpeculationCache::clear() {
  entries_.clear();
  next_ = 0;
  qs_.clear();
  free_.clear();
  rows_ = 0;
}

}  // namespace tessera::speculative
