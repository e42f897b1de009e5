// The CPU worker pool (src/common/thread_pool.h): every index once, in OpenMP's static partition;
// nested and concurrent callers; exceptions; a forked child; the load watch that gives cores
// other processes are using back to them.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/thread_pool.h"
#include "tensor/cpu/cpu_backend.h"

namespace tessera {
namespace {

// Restores the process pool's settings after a test changes them.
struct PoolSettings {
  int threads = cpu_pool().threads(), spin = cpu_pool().spin_us();
  ~PoolSettings() {
    cpu_pool().set_spin_us(spin);
    cpu_pool().set_load_aware(true);
    cpu_pool().set_threads(threads);
  }
};

TEST(ThreadPool, StaticRangeIsOpenMpsPartition) {
  for (int64_t n : {0, 1, 5, 64, 1000, 1001})
    for (int parts : {1, 2, 3, 7, 16}) {
      int64_t next = 0;
      for (int t = 0; t < parts; ++t) {
        const IndexRange r = static_range(n, t, parts);
        EXPECT_EQ(r.begin, next);
        // The first n % parts parts get n / parts + 1 indices, the rest n / parts.
        EXPECT_EQ(r.end - r.begin, n / parts + (t < n % parts ? 1 : 0));
        next = r.end;
      }
      EXPECT_EQ(next, n);
    }
}

TEST(ThreadPool, EveryIndexOnceForAnyTeam) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);  // the team is exactly the threads asked for
  for (int threads : {1, 2, 3, 4}) {
    cpu_pool().set_threads(threads);
    for (int spin : {0, 200}) {
      cpu_pool().set_spin_us(spin);  // 0: every worker sleeps between regions
      for (int64_t n : {1, 2, 3, 17, 1000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> max_team{0};
        for (int rep = 0; rep < 50; ++rep)
          cpu_pool().run("test", [&](int tid, int team) {
            int seen = max_team.load();
            while (team > seen && !max_team.compare_exchange_weak(seen, team)) {
            }
            const IndexRange r = static_range(n, tid, team);
            for (int64_t i = r.begin; i < r.end; ++i) hits[static_cast<size_t>(i)]++;
          });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)], 50) << i;
        EXPECT_EQ(max_team.load(), threads);
      }
    }
  }
}

TEST(ThreadPool, DynamicAndSumHelpers) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  cpu_pool().set_threads(3);
  std::vector<std::atomic<int>> hits(1000);
  cpu_pool().parallel_for_dynamic("test", 1000, 7,
                                  [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  const double sum =
      cpu_pool().run_sum<double>("test", [](int tid, int) { return static_cast<double>(tid + 1); });
  EXPECT_EQ(sum, 1.0 + 2.0 + 3.0);
}

TEST(ThreadPool, NestedRegionsRunInline) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  cpu_pool().set_threads(2);
  std::atomic<int> inner_team_sum{0}, inner_calls{0};
  cpu_pool().run("outer", [&](int, int) {
    cpu_pool().run("inner", [&](int tid, int team) {
      EXPECT_EQ(tid, 0);
      inner_team_sum += team;
      inner_calls++;
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
  EXPECT_EQ(inner_team_sum.load(), 2);  // a team of one each
}

TEST(ThreadPool, ConcurrentCallersBothComplete) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  cpu_pool().set_threads(2);
  // Two host threads (two engines of one process) using the pool at once: one gets the workers,
  // the other runs its region inline; every index of both is visited once.
  constexpr int64_t n = 4096;
  std::vector<std::atomic<int>> a(n), b(n);
  auto work = [&](std::vector<std::atomic<int>>& hits) {
    for (int rep = 0; rep < 200; ++rep)
      parallel_for("test", n, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
  };
  std::thread t1([&] { work(a); }), t2([&] { work(b); });
  t1.join();
  t2.join();
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(a[static_cast<size_t>(i)], 200);
    ASSERT_EQ(b[static_cast<size_t>(i)], 200);
  }
}

TEST(ThreadPool, FirstExceptionReachesTheCaller) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  cpu_pool().set_threads(2);
  for (int thrower : {0, 1}) {  // the caller's share, then a worker's
    EXPECT_THROW(cpu_pool().run("test",
                                [&](int tid, int) {
                                  if (tid == thrower) throw std::runtime_error("boom");
                                }),
                 std::runtime_error);
    // The pool still works afterwards.
    std::atomic<int> calls{0};
    cpu_pool().run("test", [&](int, int) { calls++; });
    EXPECT_EQ(calls.load(), 2);
  }
}

TEST(ThreadPool, ForkedChildRunsRegions) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  cpu_pool().set_threads(2);
  cpu_pool().run("test", [](int, int) {});  // the parent's worker exists
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The parent's worker does not exist here: the pool must start its own, not wait forever.
    std::atomic<int> calls{0};
    cpu_pool().run("test", [&](int, int) { calls++; });
    _exit(calls.load() == 2 ? 0 : 1);
  }
  int status = 0;
  for (int i = 0; i < 100 && waitpid(pid, &status, WNOHANG) == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  if (waitpid(pid, &status, WNOHANG) == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL() << "the forked child hung in a region";
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(ThreadPool, CountsRegionsByName) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  cpu_pool().set_threads(2);
  cpu_pool().reset_counts();
  cpu_pool().set_counting(true);
  for (int i = 0; i < 3; ++i) parallel_for("big", 100, [](int64_t) {});
  parallel_for(
      "small", 100, [](int64_t) {}, false);
  cpu_pool().set_counting(false);
  parallel_for("big", 100, [](int64_t) {});  // not counted
  int64_t big = -1, small = -1;
  for (const RegionCount& c : cpu_pool().counts()) {
    if (c.name == "big") big = c.forked;
    if (c.name == "small") small = c.serial;
  }
  EXPECT_EQ(big, 3);
  EXPECT_EQ(small, 1);
  cpu_pool().reset_counts();
}

// Other processes busy on every core: within a few load samples the team falls to one thread, so
// no worker spins on a core that another process is using.
TEST(ThreadPool, BusyMachineShrinksTheTeam) {
  PoolSettings keep;
  const int cpus = available_cpus();
  if (cpus < 2) GTEST_SKIP() << "one CPU: the team is one thread anyway";
  cpu_pool().set_threads(cpus);
  cpu_pool().set_load_aware(true);
  std::vector<pid_t> hogs;
  for (int i = 0; i < cpus; ++i) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      volatile uint64_t x = 0;
      for (;;) x = x + 1;
    }
    hogs.push_back(pid);
  }
  int team = cpus;
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3) && team > 1) {
    parallel_for("test", 1 << 16, [](int64_t) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    team = cpu_pool().team();
  }
  for (pid_t p : hogs) {
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  EXPECT_EQ(team, 1) << cpus << " busy processes on " << cpus << " CPUs";
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// The team may change between regions (the load watch): a kernel's bits must not depend on it.
TEST(ThreadPool, LinearBitsDoNotDependOnTheTeam) {
  PoolSettings keep;
  cpu_pool().set_load_aware(false);
  const int64_t M = 5, K = 300, N = 200;
  std::vector<float> x(M * K), w(N * K), b(N);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::cos(0.11f * static_cast<float>(i)) * 0.05f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = 0.01f * static_cast<float>(i);
  std::vector<std::vector<float>> ys;
  for (int threads : {1, 2, 3, 4}) {
    cpu_pool().set_threads(threads);
    std::vector<float> y(M * N);
    cpu::linear(x.data(), M, K, w.data(), DType::F32, N, b.data(), y.data());
    ys.push_back(y);
  }
  for (size_t i = 1; i < ys.size(); ++i)
    EXPECT_EQ(0, std::memcmp(ys[0].data(), ys[i].data(), ys[0].size() * sizeof(float))) << i;
}

}  // namespace
}  // namespace tessera
