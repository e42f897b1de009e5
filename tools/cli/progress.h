// A progress bar on stderr (redrawn in place on a terminal, silent otherwise or with --quiet).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::cli {

class ProgressBar {
 public:
  ProgressBar(std::string label, bool enabled);
  void update(int64_t done, int64_t total);
  void finish();

 private:
  std::string label_;
  bool enabled_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace tessera::cli
