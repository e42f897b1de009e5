// Wall-clock seconds from a monotonic clock, for the time splits in generation statistics.
#pragma once

#include <chrono>

namespace tessera {

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace tessera
