// Writing .safetensors files, atomically through AtomicFile: the header and each tensor's bytes
// are streamed into the temporary (no copy of the whole file in memory), which replaces the
// target only when whole.
#include <nlohmann/json.hpp>

#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace tessera {

void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  size_t off = 0;
  for (const auto& [name, t] : tensors) {
    header[name] = {{"dtype", safetensors_dtype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8) h.push_back(' ');
  const uint64_t n = h.size();
  AtomicFile out(path);
  out.write(&n, 8);
  out.write(h);
  for (const auto& [name, t] : tensors) out.write(t.bytes.data(), t.bytes.size());
  out.commit();
}

}  // namespace tessera
