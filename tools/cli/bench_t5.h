// `tessera bench -m T5_DIR`: the time of TextEncoder::encode on one prompt of a fixed number of
// tokens, and with --torch transformers' T5EncoderModel on the same weights and ids in the same run
// (python/bench_t5_torch.py).
#pragma once

#include <string>

namespace tessera::cli {

struct T5BenchOptions {
  std::string model;  // a T5 encoder directory (config.json architecture "t5_encoder")
  int threads = 0;
  bool check_weights = true;
  std::string device = "cpu";
  int tokens = 120;  // the prompt's tokens, EOS included
  int repeat = 5;    // timed encodes after one untimed warm-up
  bool torch = false;
  bool json = false;
};

void bench_t5(const T5BenchOptions& o);

}  // namespace tessera::cli
