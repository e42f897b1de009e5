#include "tensor/device.h"

#include <map>
#include <memory>
#include <mutex>

#include "tensor/cuda/cuda_backend.h"
#include "tessera/error.h"

namespace tessera {

Device Device::parse(const std::string& text) {
  const std::string bad = "device '" + text + "' is not one of: cpu, cuda, cuda:N (N a device number >= 0)";
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  const std::string prefix = "cuda:";
  check(text.size() > prefix.size() && text.compare(0, prefix.size(), prefix) == 0, bad);
  const std::string num = text.substr(prefix.size());
  check(num.size() <= 4 && num.find_first_not_of("0123456789") == std::string::npos, bad);
  return cuda(std::stoi(num));
}

std::string Device::str() const {
  return kind == Kind::Cpu ? "cpu" : "cuda:" + std::to_string(ordinal);
}

namespace {

// Checks before the backend is made, so the user sees the numbers rather than a driver error.
void check_cuda_device(const Device& d) {
  const std::string head = "--device " + d.str() + ": ";
  if (!cuda_built()) {
    std::string why;
    cuda_devices(&why);
    throw Error(head + why);
  }
  std::string why;
  const std::vector<CudaDeviceInfo> devs = cuda_devices(&why);
  if (devs.empty()) throw Error(head + "no CUDA device found (" + why + ")");
  const int n = static_cast<int>(devs.size());
  if (d.ordinal >= n) {
    std::string list;
    for (int i = 0; i < n; ++i) list += (i ? ", cuda:" : "cuda:") + std::to_string(i);
    throw Error(head + "this machine has " + std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s") +
                " (" + list + ")");
  }
}

}  // namespace

Backend& backend_for(const Device& device) {
  if (device.kind == Device::Kind::Cpu) return cpu_backend();
  // One backend per device for the process: made once, kept until exit.
  static std::mutex mu;
  static std::map<int, std::unique_ptr<Backend>> made;
  std::lock_guard<std::mutex> lock(mu);
  auto it = made.find(device.ordinal);
  if (it != made.end()) return *it->second;
  check_cuda_device(device);
  auto be = make_cuda_backend(device.ordinal);
  Backend& ref = *be;
  made.emplace(device.ordinal, std::move(be));
  return ref;
}

}  // namespace tessera
