#include "bench_concurrent.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench_common.h"
#include "tessera/error.h"
#include "tessera/log.h"
#include "text_format.h"

extern char** environ;

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

// The `tessera generate` command line of copy `copy` of a method's run.
std::vector<std::string> generate_args(const ConcurrentBenchOptions& o, const std::string& method,
                                       const fs::path& dir, int copy) {
  std::vector<std::string> a = {"tessera",
                                "generate",
                                "-q",
                                "-m",
                                o.model,
                                "--class",
                                std::to_string(o.class_id),
                                "-n",
                                std::to_string(o.n),
                                "--seed",
                                std::to_string(o.seed),
                                "--method",
                                method};
  if (o.threads > 0) a.insert(a.end(), {"-t", std::to_string(o.threads)});
  if (o.device != "cpu") a.insert(a.end(), {"--device", o.device});
  // sjd drafts by Jacobi iteration and refuses a draft model.
  if (!o.draft.empty() && method != "vanilla" && method != "sjd")
    a.insert(a.end(), {"--draft", o.draft});
  a.insert(a.end(), {"-o", (dir / (method + "_" + std::to_string(copy) + ".png")).string()});
  return a;
}

// Starts every command at once; returns each one's wall seconds (start to exit).
std::vector<double> run_at_once(const std::vector<std::vector<std::string>>& cmds) {
  std::vector<pid_t> pids;
  std::vector<double> start, secs(cmds.size(), 0.0);
  for (const auto& cmd : cmds) {
    std::vector<char*> argv;
    for (const std::string& s : cmd) argv.push_back(const_cast<char*>(s.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
      for (pid_t p : pids) kill(p, SIGTERM), waitpid(p, nullptr, 0);
      throw Error(std::string("--concurrent: cannot start a copy: ") + std::strerror(rc));
    }
    pids.push_back(pid);
    start.push_back(now_s());
  }
  bool failed = false;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    const pid_t pid = wait(&status);
    if (pid < 0) throw Error("--concurrent: lost a copy (wait failed)");
    const auto it = std::find(pids.begin(), pids.end(), pid);
    if (it == pids.end()) continue;
    const size_t i = static_cast<size_t>(it - pids.begin());
    secs[i] = now_s() - start[i];
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  if (failed) {
    std::string line;
    for (const std::string& s : cmds.front()) line += (line.empty() ? "" : " ") + s;
    throw Error("--concurrent: a copy of `" + line + "` failed; run it alone to see why");
  }
  return secs;
}

}  // namespace

void bench_concurrent(const ConcurrentBenchOptions& o) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera-concurrent-" + std::to_string(getpid()));
  fs::create_directories(dir);
  struct Cleanup {
    fs::path d;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(d, ec);
    }
  } cleanup{dir};

  nlohmann::json j = {{"copies", o.copies},
                      {"images", o.n},
                      {"class", o.class_id},
                      {"rounds", o.repeat},
                      {"methods", nlohmann::json::array()}};
  for (const std::string& method : o.methods) {
    // Warm-up alone: page cache, the cost calibration of --draft-len auto.
    run_at_once({generate_args(o, method, dir, 0)});
    std::vector<double> alone, worst, ratios;
    std::vector<std::vector<double>> copies;
    for (int r = 0; r < o.repeat; ++r) {
      log_info("bench --concurrent: " + method + ", round " + std::to_string(r + 1) + "/" +
               std::to_string(o.repeat));
      const double a = run_at_once({generate_args(o, method, dir, 0)})[0];
      std::vector<std::vector<std::string>> cmds;
      for (int c = 0; c < o.copies; ++c) cmds.push_back(generate_args(o, method, dir, c));
      const std::vector<double> t = run_at_once(cmds);
      alone.push_back(a);
      worst.push_back(*std::max_element(t.begin(), t.end()));
      ratios.push_back(worst.back() / a);
      copies.push_back(t);
    }
    j["methods"].push_back({{"method", method},
                            {"alone_s", median(alone)},
                            {"worst_copy_s", median(worst)},
                            {"worst_over_alone", median(ratios)},
                            {"alone_s_rounds", alone},
                            {"copies_s_rounds", copies},
                            {"ratio_rounds", ratios}});
  }
  if (o.format == "json") {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf(
      "%d copies of `tessera generate -m %s --class %d -n %d --seed %lld --method M` at "
      "once, against one alone (whole processes; medians of %d rounds)\n\n",
      o.copies, o.model.c_str(), o.class_id, o.n, o.seed, o.repeat);
  std::printf(
      "| method | alone s | slowest copy s | slowest / alone | each copy s (last round) |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const auto& m : j["methods"]) {
    std::string each;
    for (const auto& s : m["copies_s_rounds"].back()) {
      if (!each.empty()) each += ' ';
      each += fmt(s.get<double>(), 2);
    }
    std::printf("| %s | %s | %s | %sx | %s |\n", m["method"].get<std::string>().c_str(),
                fmt(m["alone_s"].get<double>(), 2).c_str(),
                fmt(m["worst_copy_s"].get<double>(), 2).c_str(),
                fmt(m["worst_over_alone"].get<double>(), 2).c_str(), each.c_str());
  }
}

}  // namespace tessera::cli
