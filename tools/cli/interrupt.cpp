#include "interrupt.h"

#include <unistd.h>

#include <csignal>
#include <cstring>

namespace tessera::cli {

namespace {

std::atomic<bool> g_cancel{false};
std::atomic<bool> g_line_open{false};
struct sigaction g_previous;

// Only async-signal-safe calls here: atomics, write(2) and _exit(2).
void on_sigint(int) {
  auto say = [](const char* s) {
    [[maybe_unused]] ssize_t r = write(STDERR_FILENO, s, std::strlen(s));
  };
  if (g_cancel.exchange(true)) {
    say("\ninterrupted again: exiting now (images not yet written are lost)\n");
    _exit(kInterruptedExit);
  }
  if (g_line_open.load()) say("\n");
  say("interrupted: finishing the images in progress and writing every finished one (Ctrl-C "
      "again to quit at once)\n");
}

static_assert(std::atomic<bool>::is_always_lock_free,
              "a signal handler may only use lock-free atomics");

}  // namespace

InterruptGuard::InterruptGuard() {
  g_cancel = false;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_previous);
}

InterruptGuard::~InterruptGuard() {
  sigaction(SIGINT, &g_previous, nullptr);
}

const std::atomic<bool>* InterruptGuard::flag() {
  return &g_cancel;
}

bool InterruptGuard::interrupted() {
  return g_cancel.load();
}

void set_progress_line_open(bool open) {
  g_line_open = open;
}

}  // namespace tessera::cli
