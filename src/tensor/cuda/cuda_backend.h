// The CUDA backend (issue 40): every Backend op on an NVIDIA GPU. Weights are uploaded once at
// load, activations stay on the device, ops are queued on the backend's stream, and the host
// sees results only through download / download_async + synchronize. Only this header is seen
// by code outside src/tensor/cuda/; it compiles without the CUDA toolkit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/backend.h"

namespace tessera {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;            // "NVIDIA H100 80GB HBM3"
  int64_t total_memory = 0;    // bytes
  int64_t free_memory = 0;     // bytes, when asked
  int compute_major = 0, compute_minor = 0;
};

// Whether this build has the CUDA backend (-DTESSERA_CUDA=ON).
bool cuda_built();

// The CUDA devices this process can use. Empty when there are none; then `why` (if given) says
// why in a few words: the build has no CUDA backend, the driver's error, or no device found.
std::vector<CudaDeviceInfo> cuda_devices(std::string* why = nullptr);

// A new backend on device `ordinal`, with its own stream and cuBLASLt handle. Throws Error
// naming the problem (no such device, the driver's message) when it cannot start.
std::unique_ptr<Backend> make_cuda_backend(int ordinal);

}  // namespace tessera
