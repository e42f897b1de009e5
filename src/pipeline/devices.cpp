#include "tessera/devices.h"

#include "tensor/cuda/cuda_backend.h"
#include "tensor/device.h"

namespace tessera {

std::vector<CudaDevice> list_cuda_devices(std::string* why) {
  std::vector<CudaDevice> out;
  for (const CudaDeviceInfo& d : cuda_devices(why))
    out.push_back({"cuda:" + std::to_string(d.ordinal), d.name, d.total_memory, d.free_memory,
                   d.compute_major, d.compute_minor});
  return out;
}

void check_device(const std::string& device) {
  backend_for(device);
}

}  // namespace tessera
