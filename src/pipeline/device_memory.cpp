#include "pipeline/device_memory.h"

#include <filesystem>

#include "tessera/error.h"

namespace tessera {

int64_t device_bytes_needed(const ModelConfig& config, bool load_decoder, int64_t* weights,
                            int64_t* kv) {
  namespace fs = std::filesystem;
  // The decoders' files are skipped when the pipeline does not load them.
  const bool mar = config.is_mar();
  const std::string decoder = mar ? "vae.safetensors" : "vq.safetensors";
  int64_t w = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(config.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file(ec) || e.path().extension() != ".safetensors") continue;
    if (!load_decoder && name == decoder) continue;
    w += static_cast<int64_t>(e.file_size(ec));
  }
  int64_t k = 0;
  if (!mar) {  // f32 keys and values, per layer, for the two halves of a guided image
    const GptConfig& g = config.gpt;
    const int64_t positions = g.cls_token_num + g.n_image_tokens();
    k = int64_t{2} * 2 * g.n_layer * g.n_kv_head * positions * g.head_dim() *
        static_cast<int64_t>(sizeof(float));
  }
  if (weights) *weights = w;
  if (kv) *kv = k;
  return w + k;
}

void check_device_memory(const ModelConfig& config, bool load_decoder, const Backend& backend,
                         const std::string& device) {
  int64_t w = 0, k = 0;
  const int64_t need = device_bytes_needed(config, load_decoder, &w, &k);
  const int64_t free = backend.available_memory();
  if (need <= free) return;
  const auto mib = [](int64_t b) { return std::to_string(b >> 20) + " MiB"; };
  throw ParameterError("device", "{device} " + device + ": the model needs " + mib(need) + " (" +
                                     mib(w) + " of weights, " + mib(k) +
                                     " of KV cache for one image) but " + device + " has " +
                                     mib(free) + " free");
}

}  // namespace tessera
