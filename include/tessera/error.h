// tessera: errors reported to users. Every user-facing failure is a tessera::Error with a one-line
// message that names the problem (file, tensor, flag, value).
#pragma once

#include <stdexcept>
#include <string>

namespace tessera {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws tessera::Error(msg) when cond is false.
void check(bool cond, const std::string& msg);

}  // namespace tessera
