// `tessera bench --verify-cost`: the cost of one target forward of k new positions (a
// speculative round's verification of k - 1 drafts) as a ratio to k = 1, beside the roofline
// bound from the machine's measured read bandwidth and arithmetic peak.
#pragma once

#include <string>

namespace tessera::cli {

struct VerifyCostOptions {
  std::string model;
  int threads = 0;
  bool check_weights = true;
  std::string device = "cpu";  // --device
  float cfg_scale = 1.0f;      // > 1: both CFG halves, 2k rows
  int k_from = 1, k_to = 32;
  int repeat = 3;             // timed forwards per k (minimum kept)
  double read_gbs = 0.0;      // the roofline's read bandwidth; 0: measured
  std::string format = "md";  // md | csv | json
};

// "A:B" (or "B" for 1:B) into [from, to]; a one-line error for anything else.
void parse_k_range(const std::string& text, int& from, int& to);

// A measured time this far below its roofline bound (fraction of the roofline above this) is
// not a speed but a measurement error: a wrong bound (bandwidth, peak or FLOP count) or a timing
// that did not time the work. The output flags it.
inline constexpr double kRooflineMeasurementError = 1.1;

void bench_verify_cost(const VerifyCostOptions& o);

}  // namespace tessera::cli
