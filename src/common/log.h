// Minimal leveled logging to stderr; the CLI's --quiet turns info messages off.
#pragma once

#include <string>

namespace tessera {

enum class LogLevel { Quiet = 0, Info = 1, Debug = 2 };
void set_log_level(LogLevel level);
LogLevel log_level();
void log_info(const std::string& msg);
void log_debug(const std::string& msg);

}  // namespace tessera
