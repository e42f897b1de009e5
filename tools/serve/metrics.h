// The counters of tessera serve, in Prometheus' text exposition format (GET /metrics).
#pragma once

#include <cstdint>
#include <iterator>
#include <map>
#include <string>
#include <vector>

namespace tessera::serve {

struct Metrics {
  std::map<int, int64_t> requests;  // answered, by status (499: the client went away first)
  int64_t images = 0, tokens = 0, disconnects = 0, engine_faults = 0;
  struct Acceptance {
    int64_t rounds = 0, accepted = 0;  // verification rounds, and tokens after each image's first
  };
  std::map<std::string, Acceptance> by_method;
  static constexpr double kBuckets[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  std::vector<int64_t> latency = std::vector<int64_t>(std::size(kBuckets) + 1, 0);
  double latency_sum = 0.0;
  int64_t latency_count = 0;

  void observe(double seconds);
  // The exposition, with the gauges given by the caller.
  // settings: batches (Generations); joined: settings whose requests share another's batch.
  std::string text(int64_t queued_images, int64_t in_flight_images, int64_t settings,
                   int64_t joined) const;
};

}  // namespace tessera::serve
