// Ctrl-C during a generation: the first SIGINT asks the engine to stop after the batch in flight
// (GenerateOptions::cancel), so that every finished image is still written; a second one exits at
// once with status 130.
#pragma once

#include <atomic>

namespace tessera::cli {

// Installs the handler for the lifetime of the object (the previous one is restored after).
class InterruptGuard {
 public:
  InterruptGuard();
  ~InterruptGuard();
  InterruptGuard(const InterruptGuard&) = delete;
  InterruptGuard& operator=(const InterruptGuard&) = delete;

  // Set by the first SIGINT; what GenerateOptions::cancel points at.
  static const std::atomic<bool>* flag();
  static bool interrupted();
};

// Exit status of a run ended by SIGINT (128 + 2, as shells report it).
constexpr int kInterruptedExit = 130;

// The progress bar says whether its line is open, so that the handler's message starts on a
// line of its own.
void set_progress_line_open(bool open);

}  // namespace tessera::cli
