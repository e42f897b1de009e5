// A build without the CUDA backend (-DTESSERA_CUDA=OFF, the default): no devices, and asking for
// one says how to get it.
#include "tensor/cuda/cuda_backend.h"
#include "tessera/error.h"

namespace tessera {

namespace {
constexpr const char* kNotBuilt =
    "this build of tessera has no CUDA backend (configure with -DTESSERA_CUDA=ON)";
}

bool cuda_built() {
  return false;
}

std::vector<CudaDeviceInfo> cuda_devices(std::string* why) {
  if (why) *why = kNotBuilt;
  return {};
}

std::unique_ptr<Backend> make_cuda_backend(int) {
  throw Error(kNotBuilt);
}

}  // namespace tessera
