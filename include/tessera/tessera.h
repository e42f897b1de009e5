// tessera public API: load a model directory, generate image tokens, compute logits, decode
// tokens to pixels. The CLI (tools/cli) is a thin layer over this header.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/config.h"
#include "tessera/error.h"

namespace tessera {

// What an image is conditioned on.
struct Condition {
  enum class Kind { Class, Caption, Unconditional } kind = Kind::Unconditional;
  int class_id = -1;
  // Caption: T5 features [T, caption_dim] (row-major) and the valid-row mask [T] (1 = real token).
  std::vector<float> caption;
  std::vector<uint8_t> caption_mask;

  static Condition label(int id);
  static Condition unconditional();
  // From features [rows, dim]. With rows < T the features are left-padded to T rows as LlamaGen
  // does; rows that are all zero are treated as padding.
  static Condition from_caption(std::vector<float> features, int rows, int dim,
                                const GptConfig& config);
  // Reads a caption feature file: .npy [rows, dim] (or [1, rows, dim]) or .safetensors with
  // tensor "caption" (and optional "mask").
  static Condition caption_file(const std::string& path, const GptConfig& config);
};

struct SamplingOptions {
  float cfg_scale = 4.0f;
  float cfg_interval = -1.0f;
  float temperature = 1.0f;
  int top_k = 2000;
  float top_p = 1.0f;
};

struct GenerateOptions {
  SamplingOptions sampling;
  uint64_t seed = 0;
  int batch = 1;                   // images generated together (each with its own RNG stream)
  uint64_t first_image_index = 0;  // image i of the call uses RNG stream first_image_index + i
  int max_tokens = 0;              // > 0: stop after this many tokens per image (benchmarks)
  // Called after every generated token: (tokens done, tokens total) over the whole call.
  std::function<void(int64_t, int64_t)> progress;
};

struct GenerateStats {
  int64_t images = 0, tokens = 0, forward_passes = 0;
  double seconds = 0.0, prefill_seconds = 0.0;
};

struct LoadOptions {
  bool load_decoder = true;  // false: skip vq.safetensors even if present
  int threads = 0;           // 0 = all cores
};

class Pipeline {
 public:
  static std::unique_ptr<Pipeline> load(const std::string& model_dir, const LoadOptions& opts = {});
  ~Pipeline();

  const ModelConfig& config() const;
  bool has_decoder() const;
  void set_threads(int n);

  // One token grid (grid*grid ids, raster order) per condition.
  std::vector<std::vector<int32_t>> generate(const std::vector<Condition>& conditions,
                                             const GenerateOptions& opts,
                                             GenerateStats* stats = nullptr);

  // Logits [tokens.size() + 1, vocab] without guidance: row i is the next-token logits after
  // the prefix and the first i tokens.
  std::vector<float> forward_logits(const Condition& condition, std::span<const int32_t> tokens);

  // Decoder output [n, 3, H, W] in nominal [-1, 1] for n token grids.
  std::vector<float> decode_float(std::span<const int32_t> tokens, int n);
  // RGB pixels [n, H, W, 3].
  std::vector<uint8_t> decode(std::span<const int32_t> tokens, int n);
  int image_size() const;  // decoded pixels per side
  // Bytes of transformer weights read per decode step (every layer matrix and the head).
  int64_t weight_bytes_per_step() const;

  struct Impl;

 private:
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
