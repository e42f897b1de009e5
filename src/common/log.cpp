#include "common/log.h"

#include <atomic>
#include <cstdio>

namespace tessera {

static std::atomic<int> g_level{static_cast<int>(LogLevel::Info)};

void set_log_level(LogLevel level) {
  g_level = static_cast<int>(level);
}
LogLevel log_level() {
  return static_cast<LogLevel>(g_level.load());
}

void log_info(const std::string& msg) {
  if (g_level >= static_cast<int>(LogLevel::Info)) std::fprintf(stderr, "%s\n", msg.c_str());
}
void log_debug(const std::string& msg) {
  if (g_level >= static_cast<int>(LogLevel::Debug)) std::fprintf(stderr, "%s\n", msg.c_str());
}

}  // namespace tessera
