// tessera devices: the CUDA devices --device can name, with their memory and compute capability,
// or why there are none (exit 0 either way: the answer is the output).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "tessera/devices.h"

namespace tessera::cli {

namespace {

int run_devices() {
  std::printf("cpu\n");
  std::string why;
  const std::vector<CudaDevice> devs = list_cuda_devices(&why);
  if (devs.empty()) std::printf("no CUDA device: %s\n", why.c_str());
  for (const CudaDevice& d : devs)
    std::printf("%-8s %s, %lld MiB (%lld MiB free), compute capability %d.%d\n", d.device.c_str(),
                d.name.c_str(), static_cast<long long>(d.total_memory >> 20),
                static_cast<long long>(d.free_memory >> 20), d.compute_major, d.compute_minor);
  return 0;
}

}  // namespace

Command add_devices(CLI::App& app) {
  auto* c = app.add_subcommand("devices", "List the devices --device can name (cpu, cuda:N)");
  return {c, [] { return run_devices(); }};
}

}  // namespace tessera::cli
