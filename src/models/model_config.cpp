#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "io/printable.h"
#include "io/regular_file.h"
#include "io/strict_json.h"
#include "tensor/dtype.h"
#include "tessera/config.h"
#include "tessera/error.h"

namespace tessera {

namespace {

using nlohmann::json;

constexpr size_t kMaxConfigBytes = size_t{1} << 20;  // a config.json is a few hundred bytes
// The most elements one weight tensor may have: model code multiplies pairs of config values in
// int, so every such product (vocab_size x dim, ...) must fit in int32.
constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The keys of one JSON object ("PATH gpt"), each read with its type and range checked; errors
// name the object, the key and the allowed range.
class Keys {
 public:
  Keys(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) fail("expected a JSON object");
  }
  [[noreturn]] void fail(const std::string& problem) const { throw Error(where_ + ": " + problem); }
  bool has(const char* key) const { return j_.contains(key); }
  const json& at(const char* key) const {
    if (!has(key)) fail(std::string("missing key \"") + key + "\"");
    return j_.at(key);
  }

  // An integer in [lo, hi] (no fraction: 64.0 or 1e3 are refused).
  int integer(const char* key, int lo, int hi) const { return checked_int(at(key), key, lo, hi); }
  int integer(const char* key, int lo, int hi, int fallback) const {
    return has(key) ? integer(key, lo, hi) : fallback;
  }
  // A finite number in [lo, hi], or (lo, hi] when lo_open.
  float real(const char* key, double lo, double hi, bool lo_open) const {
    const json& v = at(key);
    if (!v.is_number()) wrong_type(key, "a number");
    const double d = v.get<double>();
    if (!(lo_open ? d > lo : d >= lo) || !(d <= hi))
      fail(std::string("\"") + key + "\" must be in " + (lo_open ? "(" : "[") + num(lo) + ", " +
           num(hi) + "], got " + num(d));
    return static_cast<float>(d);
  }
  float real(const char* key, double lo, double hi, bool lo_open, float fallback) const {
    return has(key) ? real(key, lo, hi, lo_open) : fallback;
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) wrong_type(key, "a string");
    return v.get<std::string>();
  }
  std::string string(const char* key, const std::string& fallback) const {
    return has(key) ? string(key) : fallback;
  }
  bool boolean(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& v = at(key);
    if (!v.is_boolean()) wrong_type(key, "true or false");
    return v.get<bool>();
  }
  // A list of [min_n, max_n] integers, each in [lo, hi].
  std::vector<int> integers(const char* key, size_t min_n, size_t max_n, int lo, int hi) const {
    const json& v = at(key);
    if (!v.is_array()) wrong_type(key, "a list of integers");
    if (v.size() < min_n || v.size() > max_n)
      fail(std::string("\"") + key + "\" must have " + std::to_string(min_n) + " to " +
           std::to_string(max_n) + " entries, got " + std::to_string(v.size()));
    std::vector<int> out;
    for (size_t i = 0; i < v.size(); ++i)
      out.push_back(checked_int(v[i], std::string(key) + "[" + std::to_string(i) + "]", lo, hi));
    return out;
  }
  std::vector<int> integers_or(const char* key, size_t max_n, int lo, int hi,
                               std::vector<int> fallback) const {
    return has(key) ? integers(key, 0, max_n, lo, hi) : fallback;
  }
  // The storage dtype of a weight file: f32, f16 or bf16 (any spelling parse_dtype takes).
  std::string float_dtype(const char* key) const {
    const std::string s = string(key, "f32");
    bool ok = false;
    try {
      const DType t = parse_dtype(s);
      ok = t == DType::F32 || t == DType::F16 || t == DType::BF16;
    } catch (const Error&) {
    }
    if (!ok)
      fail(std::string("\"") + key + "\" must be f32, f16 or bf16, got \"" + printable(s) + "\"");
    return s;
  }
  // A weight file's name: a relative path inside the model directory.
  std::string file_name(const char* key, const std::string& fallback) const {
    const std::string s = string(key, fallback);
    bool ok = !s.empty() && s.size() <= 255 && s.front() != '/';
    for (const char c : s) ok = ok && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
    for (const auto& part : std::filesystem::path(s)) ok = ok && part != "..";
    if (!ok)
      fail(std::string("\"") + key +
           "\" must be a relative file name inside the model directory (no \"..\"), got \"" +
           printable(s) + "\"");
    return s;
  }
  // Refuses a product of config values (a tensor's element count) above kMaxElements.
  void product_fits(std::initializer_list<std::pair<const char*, int64_t>> factors) const {
    int64_t p = 1;
    std::string names, values;
    bool overflow = false;
    for (const auto& [name, v] : factors) {
      overflow = overflow || __builtin_mul_overflow(p, v, &p);
      names += (names.empty() ? "" : " x ") + std::string(name);
      values += (values.empty() ? "" : " x ") + std::to_string(v);
    }
    if (overflow || p > kMaxElements)
      fail(names + " = " + values + " exceeds the limit of " + std::to_string(kMaxElements) +
           " elements per tensor");
  }

 private:
  [[noreturn]] void wrong_type(const std::string& key, const char* expected) const {
    fail("key \"" + key + "\" has the wrong type (expected " + expected + ")");
  }
  int checked_int(const json& v, const std::string& key, int lo, int hi) const {
    if (!v.is_number_integer()) wrong_type(key, "an integer");
    // Unsigned values above int64's range must not wrap around into [lo, hi].
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() <= static_cast<uint64_t>(std::max(hi, 0))
                              : v.get<int64_t>() <= hi;
    if (!in_range || v.get<int64_t>() < lo)
      fail("\"" + key + "\" must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
           "], got " + v.dump());
    return static_cast<int>(v.get<int64_t>());
  }
  const json& j_;
  std::string where_;
};

constexpr int kMaxDim = 1 << 15;     // model width (LlamaGen-3B: 3200)
constexpr int kMaxDepth = 1024;      // layers, heads
constexpr int kMaxVocab = 1 << 24;   // vocab_size, num_classes
constexpr int kMaxChannels = 4096;   // decoder channels, embed dims
constexpr int kMaxImage = 1 << 16;   // image_size in pixels
constexpr int kMaxTokenSide = 1024;  // tokens per image side

// The decoder-shape keys shared by "vq" and "vae" (z_channels is read by the caller).
void read_conv_decoder(const Keys& k, ConvDecoderConfig& q) {
  q.ch = k.integer("ch", 1, kMaxChannels);
  // At most 8 levels: upsample_factor() is 1 << (levels - 1).
  q.ch_mult = k.integers("ch_mult", 1, 8, 1, 64);
  q.num_res_blocks = k.integer("num_res_blocks", 1, 64);
  q.norm_groups = k.integer("norm_groups", 1, kMaxChannels, 32);
  q.norm_eps = k.real("norm_eps", 0.0, 1.0, true, 1e-6f);
  for (const int m : q.ch_mult)
    k.product_fits({{"ch", q.ch}, {"ch_mult", m}, {"ch", q.ch}, {"ch_mult", m}, {"3 x 3", 9}});
}

void load_mar_config(const json& root, const std::string& where, ModelConfig& mc) {
  if (!root.contains("mar") || !root["mar"].is_object())
    throw Error(where + ": missing object \"mar\"");
  const Keys m(root["mar"], where + " mar");
  MarConfig& c = mc.mar;
  c.dim = m.integer("dim", 1, kMaxDim);
  c.encoder_depth = m.integer("encoder_depth", 1, kMaxDepth);
  c.decoder_depth = m.integer("decoder_depth", 1, kMaxDepth);
  c.n_head = m.integer("n_head", 1, kMaxDepth);
  c.mlp_ratio = m.real("mlp_ratio", 0.0, 64.0, true, 4.0f);
  c.num_classes = m.integer("num_classes", 1, kMaxVocab);
  c.buffer_size = m.integer("buffer_size", 1, 4096, 64);
  c.image_size = m.integer("image_size", 1, kMaxImage);
  c.vae_stride = m.integer("vae_stride", 1, 1024, 16);
  c.patch_size = m.integer("patch_size", 1, 64, 1);
  c.vae_embed_dim = m.integer("vae_embed_dim", 1, kMaxChannels, 16);
  c.norm_eps = m.real("norm_eps", 0.0, 1.0, true, 1e-6f);
  c.diffloss_depth = m.integer("diffloss_depth", 1, kMaxDepth);
  c.diffloss_width = m.integer("diffloss_width", 1, 1 << 16);
  c.num_train_timesteps = m.integer("num_train_timesteps", 1, 1 << 20, 1000);
  c.num_sampling_steps = m.integer("num_sampling_steps", 1, 1 << 20, 100);
  c.noise_schedule = m.string("noise_schedule", "cosine");
  c.dtype = m.float_dtype("dtype");
  c.file = m.file_name("file", "mar.safetensors");
  if (c.dim % c.n_head) m.fail("dim is not divisible by n_head");
  if (c.image_size % (c.vae_stride * c.patch_size))
    m.fail("image_size is not divisible by vae_stride * patch_size");
  if (c.seq_side() > kMaxTokenSide)
    m.fail("image_size / (vae_stride * patch_size) = " + std::to_string(c.seq_side()) +
           " tokens per side exceeds " + std::to_string(kMaxTokenSide));
  m.product_fits({{"dim", c.dim}, {"mlp_ratio x dim", c.mlp_dim()}});
  m.product_fits({{"num_classes", c.num_classes}, {"dim", c.dim}});
  m.product_fits({{"seq_len", c.seq_len()}, {"token_dim", c.token_dim()}});
  m.product_fits({{"(seq_len + buffer_size)", c.seq_len() + c.buffer_size}, {"dim", c.dim}});
  m.product_fits({{"diffloss_width", c.diffloss_width}, {"diffloss_width", c.diffloss_width}});
  m.product_fits({{"diffloss_width", c.diffloss_width}, {"token_dim", c.token_dim()}});
  if (c.noise_schedule != "cosine" && c.noise_schedule != "linear")
    m.fail("noise_schedule must be cosine or linear, got \"" + printable(c.noise_schedule) + "\"");
  if (c.num_sampling_steps > c.num_train_timesteps)
    m.fail("num_sampling_steps exceeds num_train_timesteps");

  if (root.contains("vae") && !root["vae"].is_null()) {
    const Keys v(root["vae"], where + " vae");
    VaeConfig& q = mc.vae;
    mc.has_vae = true;
    q.embed_dim = v.integer("embed_dim", 1, kMaxChannels);
    q.z_channels = v.integer("z_channels", 1, kMaxChannels, q.embed_dim);
    read_conv_decoder(v, q);
    q.attn_resolutions = v.integers_or("attn_resolutions", 16, 1, kMaxImage, {});
    q.scale = v.real("scale", 0.0, 1e6, true, 0.2325f);
    q.dtype = v.float_dtype("dtype");
    q.file = v.file_name("file", "vae.safetensors");
    if (q.embed_dim != c.vae_embed_dim)
      v.fail("embed_dim " + std::to_string(q.embed_dim) + " differs from the MAR vae_embed_dim " +
             std::to_string(c.vae_embed_dim));
    if (q.upsample_factor() != c.vae_stride)
      v.fail("the decoder upsamples by " + std::to_string(q.upsample_factor()) +
             " but the MAR config says vae_stride " + std::to_string(c.vae_stride));
  }
}

// config.json "sampling": {"cfg": F, "temperature": F, "top_k": K, "top_p": P}, all optional.
void load_eagle_config(const json& root, const std::string& where, ModelConfig& mc) {
  if (!root.contains("eagle") || !root["eagle"].is_object())
    Keys(root, where).fail("missing object \"eagle\"");
  const Keys e(root["eagle"], where + " eagle");
  EagleConfig& c = mc.eagle;
  c.dim = e.integer("dim", 1, kMaxDim);
  c.n_head = e.integer("n_head", 1, kMaxDepth);
  c.n_kv_head = e.integer("n_kv_head", 1, kMaxDepth, c.n_head);
  c.ffn_dim = e.integer("ffn_dim", 1, 1 << 20);
  c.vocab_size = e.integer("vocab_size", 1, kMaxVocab);
  c.norm_eps = e.real("norm_eps", 0.0, 1.0, true, 1e-6f);
  c.rope_base = e.real("rope_base", 1.0, 1e9, false, 10000.0f);
  c.grid = e.integer("grid", 1, kMaxTokenSide);
  c.prefix_len = e.integer("prefix_len", 0, 4095);
  const std::string feature = e.string("feature", "post_norm");
  if (feature != "post_norm" && feature != "pre_norm")
    e.fail("feature must be post_norm or pre_norm, got \"" + printable(feature) + "\"");
  c.post_norm = feature == "post_norm";
  c.prefix_token = e.integer("prefix_token", 0, kMaxVocab, 0);
  c.dtype = e.float_dtype("dtype");
  c.file = e.file_name("file", "eagle.safetensors");
  if (c.prefix_token >= c.vocab_size) e.fail("prefix_token is not below vocab_size");
  if (c.dim % c.n_head) e.fail("dim is not divisible by n_head");
  if (c.n_head % c.n_kv_head) e.fail("n_head is not divisible by n_kv_head");
  if (c.head_dim() % 4)
    e.fail("head dim " + std::to_string(c.head_dim()) +
           " is not a multiple of 4 (2D RoPE needs it)");
  e.product_fits({{"vocab_size", c.vocab_size}, {"dim", c.dim}});
  e.product_fits({{"ffn_dim", c.ffn_dim}, {"dim", c.dim}});
  e.product_fits({{"3 x dim", 3 * int64_t{c.dim}}, {"dim", c.dim}});
}

void only_keys(const json& j, const std::string& where, std::initializer_list<const char*> known);

// Draft heads (Medusa's, Hawk's) read the target's last hidden state after its final norm: the
// only "feature" they take.
void require_post_norm_feature(const Keys& e) {
  const std::string feature = e.string("feature", "post_norm");
  if (feature != "post_norm")
    e.fail(
        "feature must be post_norm (the heads read the target's last hidden state after its "
        "final norm), got \"" +
        printable(feature) + "\"");
}

// config.json "medusa": {"num_heads", "dim", "vocab_size", "lm_head", "feature", "dtype", "file"}.
void load_medusa_config(const json& root, const std::string& where, ModelConfig& mc) {
  if (!root.contains("medusa") || !root["medusa"].is_object())
    Keys(root, where).fail("missing object \"medusa\"");
  const json& m = root["medusa"];
  const std::string w = where + " medusa";
  only_keys(m, w, {"num_heads", "dim", "vocab_size", "lm_head", "feature", "dtype", "file"});
  const Keys e(m, w);
  MedusaConfig& c = mc.medusa;
  c.num_heads = e.integer("num_heads", 1, 64);
  c.dim = e.integer("dim", 1, kMaxDim);
  c.vocab_size = e.integer("vocab_size", 1, kMaxVocab);
  const std::string head = e.string("lm_head", "shared");
  if (head != "shared" && head != "per_head")
    e.fail("lm_head must be shared or per_head, got \"" + printable(head) + "\"");
  c.per_head_lm_head = head == "per_head";
  // Medusa's heads read the base model's last hidden state, which HF's Llama returns after its
  // final norm (FasterDecoding/Medusa medusa_model.py: outputs[0]).
  require_post_norm_feature(e);
  c.dtype = e.float_dtype("dtype");
  c.file = e.file_name("file", "medusa.safetensors");
  e.product_fits({{"vocab_size", c.vocab_size}, {"dim", c.dim}, {"num_heads", c.num_heads}});
  e.product_fits({{"dim", c.dim}, {"dim", c.dim}, {"num_heads", c.num_heads}});
}

// config.json "hawk": {"horizontal_heads", "vertical_heads", "row_width", "dim", "vocab_size",
// "feature", "dtype", "file"}: Hawk's heads (Chen et al., 2025, §4.2; its shape: App. C and the
// shared notes' §3.2) share the target's LM head; horizontal head k (0-based) predicts the token
// k + 1 after the one the target's row predicts, vertical head d - 1 the token d rows below it.
void load_hawk_config(const json& root, const std::string& where, ModelConfig& mc) {
  if (!root.contains("hawk") || !root["hawk"].is_object())
    Keys(root, where).fail("missing object \"hawk\"");
  const json& m = root["hawk"];
  const std::string w = where + " hawk";
  only_keys(m, w,
            {"horizontal_heads", "vertical_heads", "row_width", "dim", "vocab_size", "feature",
             "dtype", "file"});
  const Keys e(m, w);
  MedusaConfig& c = mc.medusa;
  c.num_heads = e.integer("horizontal_heads", 0, 64);
  c.vertical_heads = e.integer("vertical_heads", 1, 16);
  c.row_width = e.integer("row_width", 1, 4096);
  c.dim = e.integer("dim", 1, kMaxDim);
  c.vocab_size = e.integer("vocab_size", 1, kMaxVocab);
  require_post_norm_feature(e);
  c.dtype = e.float_dtype("dtype");
  c.file = e.file_name("file", "hawk.safetensors");
  const int heads = c.num_heads + c.vertical_heads;
  e.product_fits({{"vocab_size", c.vocab_size}, {"dim", c.dim}, {"heads", heads}});
  e.product_fits({{"dim", c.dim}, {"dim", c.dim}, {"heads", heads}});
}

// config.json "t5" and "tokenizer" (tools/convert_t5.py). Only T5 v1.1's encoder exists in this
// format: the converter refuses the original T5's ReLU FFN and per-layer position biases.
void load_t5_config(const json& root, const std::string& where, ModelConfig& mc) {
  if (!root.contains("t5") || !root["t5"].is_object())
    Keys(root, where).fail("missing object \"t5\"");
  const std::string w = where + " t5";
  only_keys(root["t5"], w,
            {"file", "vocab_size", "d_model", "d_kv", "d_ff", "num_layers", "num_heads",
             "relative_attention_num_buckets", "relative_attention_max_distance",
             "layer_norm_epsilon", "dtype"});
  const Keys e(root["t5"], w);
  T5Config& c = mc.t5;
  c.vocab_size = e.integer("vocab_size", 1, kMaxVocab);
  c.d_model = e.integer("d_model", 1, kMaxDim);
  c.d_kv = e.integer("d_kv", 1, kMaxDim);
  c.d_ff = e.integer("d_ff", 1, 1 << 20);
  c.num_layers = e.integer("num_layers", 1, kMaxDepth);
  c.num_heads = e.integer("num_heads", 1, kMaxDepth);
  c.relative_attention_num_buckets = e.integer("relative_attention_num_buckets", 2, 4096, 32);
  c.relative_attention_max_distance = e.integer("relative_attention_max_distance", 2, 1 << 20, 128);
  c.layer_norm_epsilon = e.real("layer_norm_epsilon", 0.0, 1.0, true, 1e-6f);
  c.dtype = e.float_dtype("dtype");
  c.file = e.file_name("file", "t5.safetensors");
  if (int64_t{c.num_heads} * c.d_kv > kMaxDim)
    e.fail("num_heads x d_kv = " + std::to_string(int64_t{c.num_heads} * c.d_kv) + " exceeds " +
           std::to_string(kMaxDim));
  if (c.relative_attention_num_buckets % 2)
    e.fail("relative_attention_num_buckets must be even (half for each direction), got " +
           std::to_string(c.relative_attention_num_buckets));
  e.product_fits({{"vocab_size", c.vocab_size}, {"d_model", c.d_model}});
  e.product_fits({{"2 x d_ff", 2 * int64_t{c.d_ff}}, {"d_model", c.d_model}});
  e.product_fits({{"3 x num_heads x d_kv", 3 * int64_t{c.inner_dim()}}, {"d_model", c.d_model}});
  if (!root.contains("tokenizer") || !root["tokenizer"].is_object())
    Keys(root, where).fail("missing object \"tokenizer\"");
  only_keys(root["tokenizer"], where + " tokenizer", {"file", "eos_id", "pad_id"});
  const Keys t(root["tokenizer"], where + " tokenizer");
  c.tokenizer_file = t.file_name("file", "spiece.model");
  c.eos_id = t.integer("eos_id", 0, c.vocab_size - 1, 1);
  c.pad_id = t.integer("pad_id", 0, c.vocab_size - 1, 0);
}

SamplingDefaults read_sampling_defaults(const json& s, const std::string& where) {
  if (!s.is_object()) throw Error(where + ": \"sampling\" must be an object");
  for (const auto& [key, value] : s.items())
    if (key != "cfg" && key != "temperature" && key != "top_k" && key != "top_p")
      throw Error(where + ": unknown key \"" + printable(key) +
                  "\" in \"sampling\" (known: cfg, temperature, top_k, top_p)");
  const Keys k(s, where + " sampling");
  SamplingDefaults d;
  if (k.has("cfg")) d.cfg = k.real("cfg", 0.0, 1e4, false);
  if (k.has("temperature")) d.temperature = k.real("temperature", 0.0, 1e4, false);
  if (k.has("top_p")) d.top_p = k.real("top_p", 1e-6, 1.0, false);
  if (k.has("top_k")) d.top_k = k.integer("top_k", 0, kMaxVocab);
  return d;
}

// Every key of object `j` is one of `known` ("unknown key ... (known: a, b)").
void only_keys(const json& j, const std::string& where, std::initializer_list<const char*> known) {
  if (!j.is_object()) throw Error(where + ": expected a JSON object");
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    std::string all;
    for (const char* k : known) {
      ok = ok || key == k;
      all += (all.empty() ? "" : ", ") + std::string(k);
    }
    if (!ok) throw Error(where + ": unknown key \"" + printable(key) + "\" (known: " + all + ")");
  }
}

// {"value": V, "lo": L, "hi": H} with lo <= value <= hi, all in [lo_bound, hi_bound].
RecordedInterval read_interval(const json& j, const std::string& where, double lo_bound,
                               double hi_bound) {
  only_keys(j, where, {"value", "lo", "hi"});
  const Keys k(j, where);
  RecordedInterval r;
  r.value = k.real("value", lo_bound, hi_bound, false);
  r.lo = k.real("lo", lo_bound, hi_bound, false);
  r.hi = k.real("hi", lo_bound, hi_bound, false);
  if (!(r.lo <= r.value && r.value <= r.hi)) k.fail("needs lo <= value <= hi");
  return r;
}

// A method parameter's value as its JSON type says (the method's own types and ranges are checked
// against the registry when the pipeline loads the model).
ParamValue read_param_value(const json& v, const Keys& k, const std::string& key) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{1} << 53)
      k.fail("\"" + printable(key) + "\" is out of range: " + v.dump());
    return v.get<int64_t>();
  }
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  k.fail("\"" + printable(key) + "\" must be a switch, a number or text, got " + v.dump());
}

ValidatedSetting read_validated_setting(const json& j, const std::string& where,
                                        bool with_history = true) {
  if (with_history)
    only_keys(j, where, {"params", "drafts", "measured", "history"});
  else
    only_keys(j, where, {"params", "drafts", "measured"});
  const Keys k(j, where);
  ValidatedSetting s;
  const std::string drafts = k.string("drafts");
  if (drafts != "model" && drafts != "jacobi")
    k.fail("\"drafts\" must be model or jacobi, got \"" + printable(drafts) + "\"");
  s.draft_model = drafts == "model";
  const json& params = k.at("params");
  const Keys p(params, where + " params");
  for (const auto& [name, value] : params.items()) {
    bool ok = !name.empty() && name.size() <= 64;
    for (const char c : name)
      ok = ok && (std::islower(static_cast<unsigned char>(c)) ||
                  std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '_');
    if (!ok) p.fail("\"" + printable(name) + "\" is not a parameter name (like lantern.k)");
    s.params[name] = name == "draft_len" ? ParamValue{int64_t{p.integer("draft_len", 1, 1 << 20)}}
                                         : read_param_value(value, p, name);
  }
  const json& m = k.at("measured");
  const std::string mw = where + " measured";
  only_keys(m, mw,
            {"images", "speedup", "mean_accepted_length", "top1", "frechet", "vanilla_top1",
             "frechet_floor", "date", "tessera_version"});
  const Keys mk(m, mw);
  QualityMeasurement& q = s.measured;
  q.images = mk.integer("images", 1, 1 << 30);
  q.speedup = mk.real("speedup", 0.0, 1e6, true);
  q.mean_accepted_length = mk.real("mean_accepted_length", 0.0, 1e6, false);
  q.top1 = read_interval(mk.at("top1"), mw + " top1", 0.0, 1.0);
  q.vanilla_top1 = read_interval(mk.at("vanilla_top1"), mw + " vanilla_top1", 0.0, 1.0);
  q.frechet = read_interval(mk.at("frechet"), mw + " frechet", -1e12, 1e12);
  q.frechet_floor = read_interval(mk.at("frechet_floor"), mw + " frechet_floor", -1e12, 1e12);
  q.date = mk.string("date");
  bool date_ok = q.date.size() == 10 && q.date[4] == '-' && q.date[7] == '-';
  for (size_t i = 0; i < q.date.size(); ++i)
    date_ok = date_ok && (i == 4 || i == 7 || std::isdigit(static_cast<unsigned char>(q.date[i])));
  if (!date_ok) mk.fail("\"date\" must be YYYY-MM-DD, got \"" + printable(q.date) + "\"");
  q.tessera_version = mk.string("tessera_version");
  if (q.tessera_version.empty() || q.tessera_version.size() > 64)
    mk.fail("\"tessera_version\" must be 1 to 64 characters");
  if (with_history && j.contains("history")) {
    const json& h = j["history"];
    if (!h.is_array()) k.fail("\"history\" must be a list of earlier settings");
    if (h.size() > 1000) k.fail("\"history\" holds more than 1000 settings");
    for (size_t i = 0; i < h.size(); ++i)
      s.history.push_back(
          read_validated_setting(h[i], where + " history[" + std::to_string(i) + "]", false));
  }
  return s;
}

// config.json "quality": {"tolerance": {...}, "methods": {NAME: {...}}} (docs/quality.md).
QualitySection read_quality_section(const json& q, const std::string& where) {
  const std::string w = where + " quality";
  only_keys(q, w, {"tolerance", "methods"});
  QualitySection s;
  s.present = true;
  if (q.contains("tolerance")) {
    const std::string tw = w + " tolerance";
    only_keys(q["tolerance"], tw, {"top1_drop_points", "frechet_over_floor"});
    const Keys t(q["tolerance"], tw);
    s.tolerance.top1_drop_points = t.real("top1_drop_points", 0.0, 100.0, false, 2.0f);
    s.tolerance.frechet_over_floor = t.real("frechet_over_floor", 0.0, 100.0, false, 0.1f);
  }
  if (q.contains("methods")) {
    const Keys m(q["methods"], w + " methods");
    for (const auto& [name, entry] : q["methods"].items()) {
      if (name.empty() || name.size() > 64) m.fail("a method name must be 1 to 64 characters");
      s.methods[name] = read_validated_setting(entry, w + " methods " + printable(name));
    }
  }
  return s;
}

// config.json "companions": {"draft": "../draft", "classifier": "../classifier"}, each optional:
// relative paths (a model directory moves with its companions).
Companions read_companions(const json& c, const std::string& where) {
  const std::string w = where + " companions";
  only_keys(c, w, {"draft", "eagle", "medusa", "hawk", "classifier", "text_encoder"});
  const Keys k(c, w);
  auto path = [&](const char* key) {
    const std::string s = k.string(key, "");
    if (!k.has(key)) return s;
    bool ok = !s.empty() && s.size() <= 1024 && s.front() != '/';
    for (const char ch : s) ok = ok && static_cast<unsigned char>(ch) >= 0x20 && ch != 0x7f;
    if (!ok)
      k.fail(std::string("\"") + key +
             "\" must be a directory relative to the model's (e.g. \"../draft\"), got \"" +
             printable(s) + "\"");
    return s;
  };
  Companions out;
  out.draft = path("draft");
  out.eagle = path("eagle");
  out.medusa = path("medusa");
  out.hawk = path("hawk");
  out.classifier = path("classifier");
  out.text_encoder = path("text_encoder");
  return out;
}

}  // namespace

std::string ModelConfig::companion_path(const std::string& relative) const {
  if (relative.empty()) return "";
  return (std::filesystem::path(dir) / relative).lexically_normal().string();
}

ModelConfig parse_model_config(std::string_view json_text, const std::string& dir) {
  const std::string where = (std::filesystem::path(dir) / "config.json").string();
  ModelConfig mc;
  mc.dir = dir;
  const json root = parse_strict_json(json_text, where);
  const Keys r(root, where);
  if (r.has("tessera_format")) r.integer("tessera_format", 1, 1);
  mc.architecture = r.string("architecture", "llamagen");
  if (root.contains("companions")) mc.companions = read_companions(root["companions"], where);
  if (mc.architecture == "mar") {
    load_mar_config(root, where, mc);
    return mc;
  }
  if (mc.architecture == "eagle") {
    load_eagle_config(root, where, mc);
    return mc;
  }
  if (mc.architecture == "medusa") {
    load_medusa_config(root, where, mc);
    return mc;
  }
  if (mc.architecture == "hawk") {
    load_hawk_config(root, where, mc);
    return mc;
  }
  if (mc.is_t5()) {
    load_t5_config(root, where, mc);
    return mc;
  }
  if (mc.architecture != "llamagen")
    r.fail("unsupported architecture \"" + printable(mc.architecture) +
           "\" (supported: llamagen, mar, eagle, medusa, hawk, t5_encoder)");
  if (!root.contains("gpt") || !root["gpt"].is_object()) r.fail("missing object \"gpt\"");
  const Keys g(root["gpt"], where + " gpt");
  GptConfig& c = mc.gpt;
  const std::string type = g.string("model_type");
  if (type == "c2i")
    c.model_type = ConditionType::ClassLabel;
  else if (type == "t2i")
    c.model_type = ConditionType::Caption;
  else
    g.fail("model_type must be c2i or t2i, got \"" + printable(type) + "\"");
  c.dim = g.integer("dim", 1, kMaxDim);
  c.n_layer = g.integer("n_layer", 1, kMaxDepth);
  c.n_head = g.integer("n_head", 1, kMaxDepth);
  c.n_kv_head = g.integer("n_kv_head", 1, kMaxDepth, c.n_head);
  c.ffn_dim = g.integer("ffn_dim", 1, 1 << 20);
  c.vocab_size = g.integer("vocab_size", 1, kMaxVocab);
  c.cls_token_num = g.integer("cls_token_num", 1, 4096, c.is_c2i() ? 1 : 120);
  if (c.is_c2i())
    c.num_classes = g.integer("num_classes", 1, kMaxVocab);
  else
    c.caption_dim = g.integer("caption_dim", 1, 1 << 16);
  c.rope_base = g.real("rope_base", 1.0, 1e9, false, 10000.0f);
  c.norm_eps = g.real("norm_eps", 0.0, 1.0, true, 1e-5f);
  c.image_size = g.integer("image_size", 1, kMaxImage);
  c.downsample = g.integer("downsample", 1, 1024);
  c.grid = g.integer("grid", 1, kMaxTokenSide, std::max(1, c.image_size / c.downsample));
  c.dtype = g.float_dtype("dtype");
  c.file = g.file_name("file", "gpt.safetensors");
  if (c.dim % c.n_head) g.fail("dim is not divisible by n_head");
  if (c.n_head % c.n_kv_head) g.fail("n_head is not divisible by n_kv_head");
  if (c.head_dim() % 4)
    g.fail("head dim " + std::to_string(c.head_dim()) +
           " is not a multiple of 4 (2D RoPE needs it)");
  if (c.grid * c.downsample != c.image_size)
    g.fail("image_size " + std::to_string(c.image_size) + " != grid " + std::to_string(c.grid) +
           " x downsample " + std::to_string(c.downsample));
  g.product_fits({{"vocab_size", c.vocab_size}, {"dim", c.dim}});
  g.product_fits({{"ffn_dim", c.ffn_dim}, {"dim", c.dim}});
  g.product_fits({{"3 x dim", 3 * int64_t{c.dim}}, {"dim", c.dim}});  // wqkv at most
  if (c.is_c2i()) {
    g.product_fits({{"(num_classes + 1)", int64_t{c.num_classes} + 1}, {"dim", c.dim}});
  } else {
    g.product_fits({{"caption_dim", c.caption_dim}, {"dim", c.dim}});
    g.product_fits({{"cls_token_num", c.cls_token_num}, {"caption_dim", c.caption_dim}});
  }
  if (root.contains("sampling")) mc.sampling = read_sampling_defaults(root["sampling"], where);
  if (root.contains("quality")) mc.quality = read_quality_section(root["quality"], where);

  if (root.contains("vq") && !root["vq"].is_null()) {
    const Keys v(root["vq"], where + " vq");
    VqConfig& q = mc.vq;
    mc.has_vq = true;
    q.codebook_size = v.integer("codebook_size", 1, kMaxVocab);
    q.codebook_embed_dim = v.integer("codebook_embed_dim", 1, kMaxChannels);
    q.codebook_l2_norm = v.boolean("codebook_l2_norm", true);
    q.z_channels = v.integer("z_channels", 1, kMaxChannels);
    read_conv_decoder(v, q);
    q.dtype = v.float_dtype("dtype");
    q.file = v.file_name("file", "vq.safetensors");
    if (q.codebook_size != c.vocab_size)
      v.fail("codebook_size " + std::to_string(q.codebook_size) +
             " differs from the GPT vocab_size " + std::to_string(c.vocab_size));
    v.product_fits(
        {{"codebook_size", q.codebook_size}, {"codebook_embed_dim", q.codebook_embed_dim}});
    if (q.upsample_factor() != c.downsample)
      v.fail("the decoder upsamples by " + std::to_string(q.upsample_factor()) +
             " but the GPT config says downsample " + std::to_string(c.downsample));
  }
  return mc;
}

ModelConfig load_model_config(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw Error("model directory not found: " + dir);
  const std::string path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(fs::symlink_status(path, ec)))
    throw Error("missing " + path + " (not a tessera model directory)");
  return parse_model_config(read_small_file(path, kMaxConfigBytes), dir);
}

}  // namespace tessera
