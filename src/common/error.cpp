#include "tessera/error.h"

namespace tessera {

void check(bool cond, const std::string& msg) {
  if (!cond) throw Error(msg);
}

}  // namespace tessera
