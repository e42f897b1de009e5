#include "progress.h"

#include <unistd.h>

#include <cstdio>

#include "interrupt.h"

namespace tessera::cli {

ProgressBar::ProgressBar(std::string label, bool enabled)
    : label_(std::move(label)), enabled_(enabled && isatty(fileno(stderr))) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void ProgressBar::update(int64_t done, int64_t total) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double secs = std::chrono::duration<double>(now - start_).count();
  const int width = 30;
  const int fill = total > 0 ? static_cast<int>(width * done / total) : width;
  std::string bar(fill, '=');
  if (fill < width) bar += '>' + std::string(width - fill - 1, ' ');
  const double rate = secs > 0 ? done / secs : 0.0;
  const double eta = rate > 0 ? (total - done) / rate : 0.0;
  std::fprintf(stderr, "\r%s [%s] %lld/%lld %.1f tok/s, %.1fs left ", label_.c_str(), bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), rate, eta);
  std::fflush(stderr);
  drawn_ = true;
  set_progress_line_open(true);
}

void ProgressBar::finish() {
  if (drawn_) std::fprintf(stderr, "\n");
  drawn_ = false;
  set_progress_line_open(false);
}

}  // namespace tessera::cli
