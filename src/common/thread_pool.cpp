#include "common/thread_pool.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "common/log.h"

namespace tessera {

namespace {

thread_local bool t_in_region = false;  // this thread runs a region's share: nested regions inline

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}
void futex_wake(std::atomic<uint32_t>& word, int n) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr,
          0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Waits until `word` differs from `old`: spins up to spin_ns, then sleeps on the futex with
// `sleeping` set, so that whoever changes the word knows to wake it. Returns the new value.
uint32_t await_change(const std::atomic<uint32_t>& word_c, uint32_t old,
                      std::atomic<uint32_t>& sleeping, int64_t spin_ns) {
  auto& word = const_cast<std::atomic<uint32_t>&>(word_c);
  if (spin_ns > 0) {
    const int64_t t0 = now_ns();
    for (int i = 0;; ++i) {
      const uint32_t v = word.load(std::memory_order_acquire);
      if (v != old) return v;
      cpu_relax();
      if ((i & 63) == 63 && now_ns() - t0 > spin_ns) break;
    }
  }
  for (;;) {
    // Dekker with the waker: it stores the word, then reads `sleeping`; we store `sleeping`,
    // then read the word. One of us sees the other's store.
    sleeping.store(1, std::memory_order_seq_cst);
    const uint32_t v = word.load(std::memory_order_seq_cst);
    if (v != old) {
      sleeping.store(0, std::memory_order_relaxed);
      return v;
    }
    futex_wait(word, old);
    sleeping.store(0, std::memory_order_relaxed);
    const uint32_t w = word.load(std::memory_order_acquire);
    if (w != old) return w;
  }
}

// One worker's wake-up word and sleep flag, each worker on its own cache line.
struct alignas(64) WorkerSlot {
  std::atomic<uint32_t> go{0};
  std::atomic<uint32_t> sleeping{0};
};

// CPUs this process may run on.
std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// Busy seconds of the given CPUs since boot, from /proc/stat's per-CPU lines (user nice system
// idle iowait irq softirq steal ..., in clock ticks); -1 when it cannot be read.
double busy_seconds(const std::vector<int>& cpus) {
  const int fd = open("/proc/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  std::string text;
  char buf[16384];
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  close(fd);
  static const double tick = 1.0 / static_cast<double>(sysconf(_SC_CLK_TCK));
  std::vector<bool> wanted;
  for (int c : cpus) {
    if (c >= static_cast<int>(wanted.size())) wanted.resize(static_cast<size_t>(c) + 1, false);
    wanted[static_cast<size_t>(c)] = true;
  }
  double busy = 0;
  bool any = false;
  for (size_t pos = 0; pos < text.size();) {
    const size_t eol = std::min(text.find('\n', pos), text.size());
    const char* line = text.c_str() + pos;
    pos = eol + 1;
    if (std::strncmp(line, "cpu", 3) != 0 || line[3] < '0' || line[3] > '9') continue;
    char* end = nullptr;
    const long id = std::strtol(line + 3, &end, 10);
    if (id < 0 || id >= static_cast<long>(wanted.size()) || !wanted[static_cast<size_t>(id)])
      continue;
    unsigned long long f[8] = {};
    for (int i = 0; i < 8; ++i) f[i] = std::strtoull(end, &end, 10);
    busy +=
        static_cast<double>(f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) * tick;  // not idle, iowait
    any = true;
  }
  return any ? busy : -1;
}

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

}  // namespace

struct ThreadPool::Impl {
  ThreadPool* pool = nullptr;
  std::mutex dispatch;  // one region at a time; a caller that finds it taken runs inline
  // Workers (tid i + 1 runs on slots[i]). Heap-held so that a forked child can drop them.
  std::vector<std::thread>* workers = new std::vector<std::thread>;
  std::vector<std::unique_ptr<WorkerSlot>>* slots = new std::vector<std::unique_ptr<WorkerSlot>>;
  std::atomic<bool> stop{false};

  // The region in flight, written before the workers' go words are bumped.
  RegionFn fn = nullptr;
  void* ctx = nullptr;
  int region_team = 1;
  alignas(64) std::atomic<uint32_t> pending{0};  // workers still running the region
  std::atomic<uint32_t> caller_sleeping{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;

  // Load watch (ThreadPool::set_load_aware).
  std::atomic<bool> load_aware{true};
  int64_t last_sample_ns = 0;
  double last_busy = -1, last_self = 0;
  bool noted = false;

  std::atomic<bool> counting{false};
  mutable std::mutex count_mutex;
  std::vector<std::pair<const char*, RegionCount>> counts;

  void count(const char* name, bool forked) {
    if (!counting.load(std::memory_order_relaxed)) return;
    std::lock_guard lock(count_mutex);
    for (auto& [key, c] : counts)
      if (key == name || std::strcmp(key, name) == 0) {
        ++(forked ? c.forked : c.serial);
        return;
      }
    RegionCount c;
    c.name = name;
    ++(forked ? c.forked : c.serial);
    counts.emplace_back(name, std::move(c));
  }

  void worker_main(int tid, WorkerSlot* slot) {
    uint32_t seen = 0;
    for (;;) {
      seen = await_change(slot->go, seen, slot->sleeping,
                          pool->spin_ns_.load(std::memory_order_relaxed));
      if (stop.load(std::memory_order_acquire)) return;
      t_in_region = true;
      try {
        fn(ctx, tid, region_team);
      } catch (...) {
        std::lock_guard lock(failure_mutex);
        if (!failure) failure = std::current_exception();
      }
      t_in_region = false;
      if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
          caller_sleeping.load(std::memory_order_seq_cst))
        futex_wake(pending, 1);
    }
  }

  void ensure_workers(int n) {
    while (static_cast<int>(workers->size()) < n) {
      slots->push_back(std::make_unique<WorkerSlot>());
      WorkerSlot* slot = slots->back().get();
      const int tid = static_cast<int>(workers->size()) + 1;
      workers->emplace_back([this, tid, slot] { worker_main(tid, slot); });
    }
  }

  // Every 100 ms: the cores other processes kept busy (the busy time of our CPUs less this
  // process's CPU time) decide the team: as many threads as there are free cores, at least one.
  void watch_load(int threads) {
    if (!load_aware.load(std::memory_order_relaxed)) return;
    const int64_t now = now_ns();
    if (last_sample_ns != 0 && now - last_sample_ns < 100'000'000) return;
    const std::vector<int> cpus = affinity_cpus();
    const double busy = busy_seconds(cpus), self = process_cpu_seconds();
    if (busy < 0) {  // no /proc/stat: nothing to go by
      load_aware.store(false);
      return;
    }
    const double wall = 1e-9 * static_cast<double>(now - last_sample_ns);
    if (last_sample_ns != 0 && last_busy >= 0) {
      const double others = std::max(0.0, (busy - last_busy) - (self - last_self)) / wall;
      const double free = static_cast<double>(cpus.size()) - others;
      // 0.35: a stray tick or a light load (a shell, a monitor) does not cost a thread.
      const int team = std::clamp(static_cast<int>(std::floor(free + 0.35)), 1, threads);
      pool->team_.store(team, std::memory_order_relaxed);
      if (team < threads && !noted) {
        noted = true;
        char line[256];
        std::snprintf(line, sizeof line,
                      "note: other processes keep %.1f of this machine's %zu CPUs busy: running on "
                      "%d thread%s instead of %d while they do",
                      others, cpus.size(), team, team == 1 ? "" : "s", threads);
        log_info(line);
      }
    }
    last_sample_ns = now;
    last_busy = busy;
    last_self = self;
  }

  void shut_down() {
    stop.store(true, std::memory_order_release);
    for (auto& slot : *slots) {
      slot->go.fetch_add(1, std::memory_order_seq_cst);
      futex_wake(slot->go, 1);
    }
    for (auto& w : *workers) w.join();
  }

  // In a forked child only the forking thread exists: forget the workers (their stacks belong to
  // the parent's image) and any region the parent had in flight.
  void after_fork_in_child() {
    workers = new std::vector<std::thread>;  // the parent's handles leak: they cannot be joined
    slots = new std::vector<std::unique_ptr<WorkerSlot>>;
    new (&dispatch) std::mutex;
    new (&failure_mutex) std::mutex;
    new (&count_mutex) std::mutex;
    pending.store(0);
    caller_sleeping.store(0);
    t_in_region = false;
  }
};

ThreadPool::ThreadPool() : impl_(new Impl), spin_ns_(200'000) {
  impl_->pool = this;
}

ThreadPool::~ThreadPool() {
  impl_->shut_down();
  delete impl_->workers;
  delete impl_->slots;
  delete impl_;
}

void ThreadPool::set_threads(int n) {
  n = std::max(1, n);
  std::lock_guard lock(impl_->dispatch);
  threads_.store(n, std::memory_order_relaxed);
  team_.store(n, std::memory_order_relaxed);
  impl_->last_sample_ns = 0;  // a fresh start for the load watch
}

void ThreadPool::set_load_aware(bool on) {
  std::lock_guard lock(impl_->dispatch);
  impl_->load_aware.store(on);
  impl_->last_sample_ns = 0;
  if (!on) team_.store(threads_.load());
}

void ThreadPool::set_counting(bool on) {
  impl_->counting.store(on);
}

std::vector<RegionCount> ThreadPool::counts() const {
  std::lock_guard lock(impl_->count_mutex);
  std::vector<RegionCount> out;
  for (const auto& [key, c] : impl_->counts) out.push_back(c);
  return out;
}

void ThreadPool::reset_counts() {
  std::lock_guard lock(impl_->count_mutex);
  impl_->counts.clear();
}

void ThreadPool::run(const char* name, RegionFn fn, void* ctx, bool parallel) {
  Impl& m = *impl_;
  const int threads = threads_.load(std::memory_order_relaxed);
  const bool shared = parallel && threads > 1 && !t_in_region;
  m.count(name, shared);
  std::unique_lock lock(m.dispatch, std::defer_lock);
  if (!shared || !lock.try_lock()) {
    fn(ctx, 0, 1);
    return;
  }
  m.watch_load(threads);
  const int team = std::min(threads, team_.load(std::memory_order_relaxed));
  if (team == 1) {
    lock.unlock();
    fn(ctx, 0, 1);
    return;
  }
  m.ensure_workers(team - 1);
  m.fn = fn;
  m.ctx = ctx;
  m.region_team = team;
  m.failure = nullptr;
  m.pending.store(static_cast<uint32_t>(team - 1), std::memory_order_relaxed);
  for (int i = 0; i < team - 1; ++i) {
    WorkerSlot& slot = *(*m.slots)[static_cast<size_t>(i)];
    slot.go.fetch_add(1, std::memory_order_seq_cst);  // publishes the region (release)
    if (slot.sleeping.load(std::memory_order_seq_cst)) futex_wake(slot.go, 1);
  }
  t_in_region = true;
  try {
    fn(ctx, 0, team);
  } catch (...) {
    std::lock_guard flock(m.failure_mutex);
    if (!m.failure) m.failure = std::current_exception();
  }
  t_in_region = false;
  // Join: spin for the stragglers, then sleep until the last one wakes us.
  const int64_t spin_ns = spin_ns_.load(std::memory_order_relaxed);
  for (uint32_t v; (v = m.pending.load(std::memory_order_acquire)) != 0;) {
    const uint32_t w = await_change(m.pending, v, m.caller_sleeping, spin_ns);
    if (w == 0) break;
  }
  std::exception_ptr failure = std::exchange(m.failure, nullptr);
  lock.unlock();
  if (failure) std::rethrow_exception(failure);
}

ThreadPool& cpu_pool() {
  static ThreadPool* pool = [] {
    auto* p = new ThreadPool;  // never destroyed: kernels may run from other statics' destructors
    pthread_atfork(nullptr, nullptr, [] { cpu_pool().impl_->after_fork_in_child(); });
    return p;
  }();
  return *pool;
}

}  // namespace tessera
