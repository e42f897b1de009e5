#include "tensor/device.h"

#include <map>
#include <memory>
#include <mutex>

#include "tensor/cuda/cuda_backend.h"
#include "tessera/error.h"

namespace tessera {

Device Device::parse(const std::string& text) {
  const std::string bad =
      "{device} " + text + ": not a device (one of: cpu, cuda, cuda:N with N a device number)";
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  const std::string prefix = "cuda:";
  const std::string num = text.size() > prefix.size() && text.compare(0, prefix.size(), prefix) == 0
                              ? text.substr(prefix.size())
                              : "";
  check_param(
      !num.empty() && num.size() <= 4 && num.find_first_not_of("0123456789") == std::string::npos,
      "device", bad);
  return cuda(std::stoi(num));
}

std::string Device::str() const {
  return kind == Kind::Cpu ? "cpu" : "cuda:" + std::to_string(ordinal);
}

namespace {

// Checks before the backend is made, so the user sees the numbers rather than a driver error.
void check_cuda_device(const Device& d) {
  std::string why;
  const std::vector<CudaDeviceInfo> devs = cuda_devices(&why);
  if (!cuda_built()) throw Error(why);
  if (devs.empty()) throw Error("no CUDA device found (" + why + ")");
  const int n = static_cast<int>(devs.size());
  if (d.ordinal >= n) {
    std::string list;
    for (int i = 0; i < n; ++i) list += (i ? ", cuda:" : "cuda:") + std::to_string(i);
    throw Error("this machine has " + std::to_string(n) + " CUDA device" + (n == 1 ? "" : "s") +
                " (" + list + ")");
  }
}

}  // namespace

Backend& backend_for(const Device& device) {
  if (device.kind == Device::Kind::Cpu) return cpu_backend();
  // One backend per device for the process: made once and never destroyed, since static
  // destructors may run after the CUDA runtime has unloaded (freeing then is an error).
  static std::mutex mu;
  static auto* made = new std::map<int, std::unique_ptr<Backend>>;
  const std::lock_guard<std::mutex> lock(mu);
  if (auto it = made->find(device.ordinal); it != made->end()) return *it->second;
  check_cuda_device(device);
  std::unique_ptr<Backend> be = make_cuda_backend(device.ordinal);
  Backend& ref = *be;
  made->emplace(device.ordinal, std::move(be));
  return ref;
}

Backend& backend_for(const std::string& device) {
  const Device d = Device::parse(device);
  try {
    return backend_for(d);
  } catch (const ParameterError&) {
    throw;
  } catch (const Error& e) {
    throw ParameterError("device", "{device} " + device + ": " + e.what());
  }
}

}  // namespace tessera
