// The CPU worker pool: every parallel loop of the engine runs on it (the CPU backend sizes it).
//
// Why not OpenMP: libgomp's workers spin at every barrier for as long as its environment says
// (OMP_WAIT_POLICY, GOMP_SPINCOUNT, read once at load, out of the engine's hands), so two
// processes that each believe they own every core starve each other: two emoji runs at once on 2
// cores took 200x their time alone (issue 37). This pool, as ggml's threadpool does, spins a
// bounded time for the next region and then sleeps on a futex, and it watches the machine's load:
// while other processes keep cores busy, regions run on as many threads as there are free cores
// (at least the caller), and the workers left out sleep instead of spinning on a core they do
// not have.
//
// A region's threads split the work by index (static_range), so every kernel that gives each
// output to one thread gives the same bits for any team size; the engine's kernels are written
// that way (batch and thread invariance), which is what lets the team shrink and grow at run time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace tessera {

// Part t of `parts` contiguous parts of [0, n): the first n % parts parts one longer (OpenMP's
// schedule(static), so kernels keep the partition they were tuned with).
struct IndexRange {
  int64_t begin = 0, end = 0;
};
inline IndexRange static_range(int64_t n, int t, int parts) {
  const int64_t q = n / parts, r = n % parts;
  const int64_t begin = t * q + (t < r ? t : r);
  return {begin, begin + q + (t < r ? 1 : 0)};
}

// Regions forked by name (see ThreadPool::set_counting).
struct RegionCount {
  std::string name;
  int64_t forked = 0;  // shared between the threads (one wake-up and one join each), or would
                       // have been had the machine's load left the cores free
  int64_t serial = 0;  // too small to share, or a single thread configured
};

class ThreadPool;
ThreadPool& cpu_pool();

class ThreadPool {
 public:
  // region(tid, team) on each of `team` threads; the caller runs tid 0.
  using RegionFn = void (*)(void* ctx, int tid, int team);

  ThreadPool();
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // The most threads a region uses, the caller included (>= 1). Workers start at the first
  // region that needs them.
  void set_threads(int n);
  int threads() const { return threads_.load(std::memory_order_relaxed); }
  // Threads a region forked now would use: threads(), fewer while other processes keep cores
  // busy. Kernels may size their work items by it; a region's own `team` is what it gets.
  int team() const { return team_.load(std::memory_order_relaxed); }

  // How long a waiting thread spins before it sleeps (microseconds; 0: sleep at once). Spinning
  // covers the gaps between the regions of a forward pass (a few microseconds each); a sleeping
  // worker costs a futex wake-up (~5-50 us) on the next region.
  void set_spin_us(int us) { spin_ns_.store(int64_t{us} * 1000, std::memory_order_relaxed); }
  int spin_us() const { return static_cast<int>(spin_ns_.load(std::memory_order_relaxed) / 1000); }

  // Whether team() follows the machine's load (/proc/stat against this process's CPU time, every
  // 100 ms); off: team() == threads().
  void set_load_aware(bool on);

  // Counts regions by name (for `bench`'s per-op counts); counting costs a lock per region.
  void set_counting(bool on);
  std::vector<RegionCount> counts() const;
  void reset_counts();

  // region(ctx, tid, team) on `team` threads, or on the caller alone (tid 0, team 1) when
  // `parallel` is false, the team is one, the caller is itself a pool thread (nested regions run
  // inline), or another thread of this process is using the pool. Returns when every thread has
  // finished; the first exception thrown by any of them is rethrown here.
  void run(const char* name, RegionFn fn, void* ctx, bool parallel = true);

  template <class F>
  void run(const char* name, F&& region, bool parallel = true) {
    using Region = std::remove_reference_t<F>;  // may be const
    run(
        name, [](void* ctx, int tid, int team) { (*static_cast<Region*>(ctx))(tid, team); },
        const_cast<void*>(static_cast<const void*>(&region)), parallel);
  }

  // body(i) for every i in [0, n), split in contiguous ranges between the team.
  template <class F>
  void parallel_for(const char* name, int64_t n, F&& body, bool parallel = true) {
    if (n <= 0) return;
    auto region = [&](int tid, int team) {
      const IndexRange r = static_range(n, tid, team);
      for (int64_t i = r.begin; i < r.end; ++i) body(i);
    };
    run(name, region, parallel && n > 1);
  }

  // The sum, in thread order, of region(tid, team)'s results over the team.
  template <class T, class F>
  T run_sum(const char* name, F&& region, bool parallel = true) {
    std::vector<T> parts(static_cast<size_t>(threads()), T{});
    run(
        name, [&](int tid, int team) { parts[static_cast<size_t>(tid)] = region(tid, team); },
        parallel);
    T total{};
    for (const T& p : parts) total += p;
    return total;
  }

  // body(i) for every i in [0, n), handed out `chunk` at a time to whichever thread is free
  // (OpenMP's schedule(dynamic)): for items of uneven cost.
  template <class F>
  void parallel_for_dynamic(const char* name, int64_t n, int64_t chunk, F&& body,
                            bool parallel = true) {
    if (n <= 0) return;
    std::atomic<int64_t> next{0};
    auto region = [&](int, int) {
      for (;;) {
        const int64_t b = next.fetch_add(chunk, std::memory_order_relaxed);
        if (b >= n) return;
        for (int64_t i = b; i < std::min(n, b + chunk); ++i) body(i);
      }
    };
    run(name, region, parallel && n > chunk);
  }

  struct Impl;

 private:
  friend ThreadPool& cpu_pool();
  Impl* impl_;
  std::atomic<int> threads_{1};
  std::atomic<int> team_{1};
  std::atomic<int64_t> spin_ns_;
};

ThreadPool& cpu_pool();  // the process's pool (one, as the process has one CPU backend)

// Shorthands on cpu_pool().
template <class F>
void parallel_for(const char* name, int64_t n, F&& body, bool parallel = true) {
  cpu_pool().parallel_for(name, n, std::forward<F>(body), parallel);
}

}  // namespace tessera
