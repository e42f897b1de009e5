// Logging inside the engine: the public levels and info lines (tessera/log.h), plus debug lines.
#pragma once

#include <string>

#include "tessera/log.h"

namespace tessera {

void log_debug(const std::string& msg);

}  // namespace tessera
