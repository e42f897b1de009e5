// Number formatting for the CLI's messages and tables.
#pragma once

#include <sstream>
#include <string>

namespace tessera::cli {

// v with `prec` digits after the decimal point.
inline std::string fmt(double v, int prec = 2) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(prec);
  s << v;
  return s.str();
}

}  // namespace tessera::cli
