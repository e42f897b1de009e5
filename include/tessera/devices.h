// The devices a model can run on (LoadOptions::device): checking a choice before any work, and
// listing the CUDA devices (`tessera devices`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera {

struct CudaDevice {
  std::string device;                         // "cuda:0", as LoadOptions::device takes it
  std::string name;                           // "NVIDIA H100 80GB HBM3"
  int64_t total_memory = 0, free_memory = 0;  // bytes
  int compute_major = 0, compute_minor = 0;
};

// The CUDA devices this process can use. Empty when there are none; then `why` says why (no CUDA
// backend in this build, the driver's message, no device found).
std::vector<CudaDevice> list_cuda_devices(std::string* why);

// Throws ParameterError("device"), one line starting with the text ("device cuda:3: this machine
// has 1 CUDA device (cuda:0)"), unless `device` ("cpu", "cuda", "cuda:N")
// names a device this build and machine have; its backend is then ready for Pipeline::load.
void check_device(const std::string& device);

}  // namespace tessera
