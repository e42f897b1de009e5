// Leveled logging to stderr. Front-ends set the level (a --quiet flag turns info lines off) and
// print their own info lines through the same switch as the engine's.
#pragma once

#include <string>

namespace tessera {

enum class LogLevel { Quiet = 0, Info = 1, Debug = 2 };
void set_log_level(LogLevel level);
LogLevel log_level();
// One line on stderr when the level is Info or above.
void log_info(const std::string& msg);

}  // namespace tessera
