// `tessera bench` without --methods on a LlamaGen model: vanilla decoding speed against the
// machine's read bandwidth, optionally against a second model (e.g. the same weights in another
// dtype) and the project's PyTorch reference, all timed in one process.
#pragma once

#include <string>

#include "tessera/tessera.h"

namespace tessera::cli {

struct VanillaBenchOptions {
  std::string model;
  std::string against;  // a second model directory timed in the same rounds ("" = none)
  int threads = 0;
  bool check_weights = true;   // --no-check-weights turns the NaN/Inf scan off
  std::string device = "cpu";  // --device
  int n = 1;                   // images, generated as one batch
  int tokens = 0;              // per image; 0 = the whole grid
  int class_id = 0;
  SamplingOptions sampling;  // cfg (2 rows per image when > 1), temperature, top-k, top-p
  DeviceLoop device_loop = DeviceLoop::Auto;  // --device-loop
  int repeat = 1;            // measured rounds; each round times every model once
  bool torch = false;        // also time python/bench_torch.py on `model`
  bool json = false;
};

void bench_vanilla(const VanillaBenchOptions& o);

}  // namespace tessera::cli
