// Whether an HTTP client that is waiting for its answer has closed its connection, so that the
// server can free its images' slots at once rather than at its timeout. cpp-httplib 0.11 (Debian
// 12's) gives a handler no such notice (later versions have Request::is_connection_closed, which
// peeks at the socket the same way).
#pragma once

#include <string>

namespace tessera::serve {

// True when this process's socket from local_port to (remote_addr, remote_port) has seen the
// client's end of stream or a reset. False while it is open, and where that cannot be told
// (no such socket, or not Linux).
bool client_gone(const std::string& remote_addr, int remote_port, int local_port);

}  // namespace tessera::serve
