// Model configurations, as stored in a model directory's config.json (docs/model_format.md).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tessera/methods.h"

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

// The shape of the convolutional image decoder shared by VQGAN (LlamaGen's VQ) and LDM's
// AutoencoderKL (MAR's KL-16).
struct ConvDecoderConfig {
  int z_channels = 0, ch = 0, num_res_blocks = 0;
  std::vector<int> ch_mult;
  int norm_groups = 32;
  float norm_eps = 1e-6f;

  int upsample_factor() const { return 1 << (static_cast<int>(ch_mult.size()) - 1); }
};

struct VqConfig : ConvDecoderConfig {
  int codebook_size = 0, codebook_embed_dim = 0;
  bool codebook_l2_norm = true;
  std::string dtype = "f32";
  std::string file = "vq.safetensors";
};

// MAR (Li et al. 2024): MAE encoder/decoder with buffer (class) tokens, and the DiffLoss head
// (SimpleMLPAdaLN) that samples each continuous token by diffusion. Reference: LTH14/mar
// (models/mar.py, models/diffloss.py).
struct MarConfig {
  int dim = 0, encoder_depth = 0, decoder_depth = 0, n_head = 0;
  float mlp_ratio = 4.0f;
  int num_classes = 0;   // class_emb rows; the unconditional branch uses fake_latent
  int buffer_size = 64;  // buffer rows, all set to the class embedding
  int image_size = 0, vae_stride = 16, patch_size = 1, vae_embed_dim = 16;
  float norm_eps = 1e-6f;
  int diffloss_depth = 0, diffloss_width = 0;
  int num_train_timesteps = 1000, num_sampling_steps = 100;
  std::string noise_schedule = "cosine";
  std::string dtype = "f32";
  std::string file = "mar.safetensors";

  int seq_side() const { return image_size / vae_stride / patch_size; }
  int seq_len() const { return seq_side() * seq_side(); }
  int token_dim() const { return vae_embed_dim * patch_size * patch_size; }
  int head_dim() const { return dim / n_head; }
  int mlp_dim() const { return static_cast<int>(static_cast<float>(dim) * mlp_ratio); }
};

// LDM's AutoencoderKL decoder (MAR's KL-16 tokenizer).
struct VaeConfig : ConvDecoderConfig {
  int embed_dim = 16;
  std::vector<int> attn_resolutions;  // LDM's curr_res values with up-path attention
  float scale = 0.2325f;              // latents = posterior sample * scale; decode(tokens / scale)
  std::string dtype = "f32";
  std::string file = "vae.safetensors";
};

// The optional "sampling" object of a LlamaGen config.json: the settings the model's authors
// recommend, used by `tessera generate` for every flag the user does not give (the role of a
// Hugging Face generation_config.json). Unset fields keep LlamaGen's defaults.
struct SamplingDefaults {
  std::optional<float> cfg, temperature, top_p;
  std::optional<int> top_k;
};

// The optional "quality" object of a config.json (docs/quality.md, issue 23): how much image
// quality a lossy method may give up on this model, and per method the settings `tessera tune`
// measured within that tolerance. The settings become the model's defaults for the method.
struct QualityTolerance {
  // Top-1 (classifier accuracy on the requested class) may fall at most this many percentage
  // points below vanilla's, measured on the same classes and seeds.
  double top1_drop_points = 2.0;
  // The Frechet distance of the method's images to vanilla's may exceed the noise floor (the
  // distance of vanilla on other seeds to vanilla, same n) by at most this fraction.
  double frechet_over_floor = 0.10;
};

// A statistic with its 95% bootstrap interval, as recorded.
struct RecordedInterval {
  double value = 0.0, lo = 0.0, hi = 0.0;
};

// What was measured for a validated setting.
struct QualityMeasurement {
  int images = 0;        // per configuration (vanilla, vanilla*, the method)
  double speedup = 0.0;  // vanilla's s/image over the method's, same run
  double mean_accepted_length = 0.0;
  RecordedInterval top1;           // fraction in [0, 1]
  RecordedInterval frechet;        // Frechet distance to vanilla
  RecordedInterval vanilla_top1;   // vanilla's top-1 in the same run (both seed sets, 2n images)
  RecordedInterval frechet_floor;  // vanilla* (other seeds) to vanilla: the noise floor
  std::string date;                // YYYY-MM-DD (UTC)
  std::string tessera_version;
};

struct ValidatedSetting {
  // The method's parameters by name, and "draft_len" when it was part of the setting.
  MethodParams params;
  bool draft_model = true;  // measured with a draft model (false: Jacobi drafts)
  QualityMeasurement measured;
  // The settings this one replaced, newest first ("history"; records only, never applied):
  // tune --write keeps the previous one here.
  std::vector<ValidatedSetting> history;
};

struct QualitySection {
  bool present = false;  // the config.json has a "quality" object
  QualityTolerance tolerance;
  std::map<std::string, ValidatedSetting> methods;  // by method name
};

// The optional "companions" object of a config.json: the directories of the models that work with
// this one, relative to its directory (e.g. "../draft"), so that `-m DIR` runs what the default
// model runs. Empty: none named.
struct Companions {
  std::string draft;       // the draft model of the draft-model methods (sd, lantern, ...)
  std::string eagle;       // the EAGLE drafter (tools/convert_eagle.py) of method eagle
  std::string medusa;      // the Medusa heads (python/tessera_ref/medusa.py) of the medusa methods
  std::string hawk;        // Hawk's horizontal and vertical heads of the hawk methods
  std::string classifier;  // the image classifier of the quality columns (bench, tune)
  std::string text_encoder;  // the T5 encoder of a t2i model's typed prompts
};

// An EAGLE drafter (Li et al., 2024, as LANTERN trains it for LlamaGen): one decoder layer over
// (the target's feature, the next token's embedding), read through the target's LM head. It
// drafts for the target its config.json was converted against (tools/convert_eagle.py).
struct EagleConfig {
  int dim = 0, n_head = 0, n_kv_head = 0, ffn_dim = 0, vocab_size = 0;
  float norm_eps = 1e-6f, rope_base = 10000.0f;
  int grid = 0;
  int prefix_len = 0;     // drafter prefix rows: the target's prefix length - 1
  bool post_norm = true;  // the feature read: the target's last hidden state after its final norm
  int prefix_token = 0;   // token id paired with the target's prefix features (LANTERN: 0)
  std::string dtype = "f32";
  std::string file = "eagle.safetensors";

  int head_dim() const { return dim / n_head; }
};

// Medusa draft heads (Cai et al., 2024): K heads, each a ResBlock h + SiLU(W h + b) on the
// target's last hidden state after its final norm, read through the target's LM head (Medusa-2's
// shared lm_head) or a per-head one (Medusa-1). Bound to the target whose width and vocabulary
// they were trained for (src/models/medusa_heads.h).
// Medusa's heads, or Hawk's: its horizontal heads are Medusa's, and it adds vertical heads of
// the same ResBlock form (Hawk App. C), vertical head d predicting the token d image rows below
// the one the target's row predicts ("architecture": "hawk", config "hawk").
struct MedusaConfig {
  int num_heads = 0, dim = 0, vocab_size = 0;  // num_heads: Medusa's (Hawk's horizontal ones)
  bool per_head_lm_head = false;  // "lm_head": "per_head" (Medusa-1) or "shared" (default)
  int vertical_heads = 0;         // Hawk: its vertical speculation depth D (0: Medusa)
  int row_width = 0;  // Hawk: image tokens per row W the vertical heads were trained for
  std::string dtype = "f32";
  std::string file = "medusa.safetensors";
  bool is_hawk() const { return vertical_heads > 0; }
};

// A T5 v1.1 / flan-T5 text encoder (Raffel et al., 2020; v1.1: gated-GELU FFN, relative position
// buckets, no absolute positions): the encoder stack of HF's T5EncoderModel and its SentencePiece
// tokenizer, converted by tools/convert_t5.py (architecture "t5_encoder").
struct T5Config {
  int vocab_size = 0, d_model = 0, d_kv = 0, d_ff = 0, num_layers = 0, num_heads = 0;
  int relative_attention_num_buckets = 32, relative_attention_max_distance = 128;
  float layer_norm_epsilon = 1e-6f;
  std::string dtype = "f32";
  std::string file = "t5.safetensors";
  std::string tokenizer_file = "spiece.model";
  int eos_id = 1, pad_id = 0;

  int inner_dim() const { return num_heads * d_kv; }
};

struct ModelConfig {
  std::string dir;
  bool check_weights = true;  // set by the loader, not config.json: scan weights for NaN/Inf
  std::string architecture = "llamagen";  // llamagen | mar | eagle | medusa | hawk | t5_encoder
  GptConfig gpt;                          // llamagen
  EagleConfig eagle;                      // eagle (a drafter, not a model of its own)
  MedusaConfig medusa;                    // medusa, hawk (draft heads, not a model of their own)
  T5Config t5;                            // t5_encoder (a text encoder, not an image model)
  SamplingDefaults sampling;              // llamagen
  QualitySection quality;                 // llamagen
  bool has_vq = false;
  VqConfig vq;
  MarConfig mar;  // mar
  bool has_vae = false;
  VaeConfig vae;
  Companions companions;  // both families

  bool is_mar() const { return architecture == "mar"; }
  bool is_eagle() const { return architecture == "eagle"; }
  bool is_medusa() const { return architecture == "medusa"; }
  bool is_hawk() const { return architecture == "hawk"; }
  bool is_t5() const { return architecture == "t5_encoder"; }
  // A companion's path (Companions::draft, ...) resolved against the model's directory ("" when
  // not named); whether it holds a model is the caller's to check, when it needs it.
  std::string companion_path(const std::string& relative) const;
};

// Reads and validates DIR/config.json; throws tessera::Error naming the missing or bad key.
// Every number is range-checked (the message gives the allowed range), so that sizes computed
// from the config cannot overflow; duplicate keys are an error.
ModelConfig load_model_config(const std::string& dir);
// Validates the text of DIR/config.json as load_model_config does, without reading a file.
ModelConfig parse_model_config(std::string_view json_text, const std::string& dir);

// The text of a config.json with `setting` recorded for `method` in its "quality" section (created
// with the default tolerance when missing); every other key is kept, in its order. A setting it
// replaces moves to the front of the new one's "history" (setting.history is not written). The
// result is checked with parse_model_config. dir: for messages.
std::string with_validated_setting(std::string_view json_text, const std::string& dir,
                                   const std::string& method, const ValidatedSetting& setting);
// with_validated_setting on DIR/config.json, written atomically (tessera/file_io.h).
void write_validated_setting(const std::string& dir, const std::string& method,
                             const ValidatedSetting& setting);

}  // namespace tessera
