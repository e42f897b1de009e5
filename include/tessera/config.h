// Model configurations, as stored in a model directory's config.json (docs/model_format.md).
#pragma once

#include <string>
#include <vector>

namespace tessera {

enum class ConditionType { ClassLabel, Caption };  // LlamaGen c2i / t2i

struct GptConfig {
  ConditionType model_type = ConditionType::ClassLabel;
  int dim = 0, n_layer = 0, n_head = 0, n_kv_head = 0, ffn_dim = 0;
  int vocab_size = 0;
  int num_classes = 0;    // c2i: the label table has num_classes + 1 rows (last = null class)
  int cls_token_num = 1;  // prefix length T
  int caption_dim = 0;    // t2i: T5 feature width
  float rope_base = 10000.0f;
  float norm_eps = 1e-5f;
  int image_size = 0, downsample = 0, grid = 0;
  std::string dtype = "f32";  // storage dtype of gpt.safetensors
  std::string file = "gpt.safetensors";

  int head_dim() const { return dim / n_head; }
  int n_image_tokens() const { return grid * grid; }
  bool is_c2i() const { return model_type == ConditionType::ClassLabel; }
};

struct VqConfig {
  int codebook_size = 0, codebook_embed_dim = 0;
  bool codebook_l2_norm = true;
  int z_channels = 0, ch = 0, num_res_blocks = 0;
  std::vector<int> ch_mult;
  int norm_groups = 32;
  float norm_eps = 1e-6f;
  std::string dtype = "f32";
  std::string file = "vq.safetensors";

  int upsample_factor() const { return 1 << (static_cast<int>(ch_mult.size()) - 1); }
};

struct ModelConfig {
  std::string dir;
  std::string architecture = "llamagen";
  GptConfig gpt;
  bool has_vq = false;
  VqConfig vq;
};

// Reads and validates DIR/config.json; throws tessera::Error naming the missing or bad key.
ModelConfig load_model_config(const std::string& dir);

}  // namespace tessera
