#include "tensor/backend.h"

#include "tensor/cpu/cpu_backend.h"

namespace tessera {

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace tessera
