#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tessera/config.h"
#include "tessera/error.h"

namespace tessera {

namespace {

using nlohmann::json;

template <typename T>
T req(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw Error(where + ": missing key \"" + key + "\"");
  try {
    return j.at(key).get<T>();
  } catch (const std::exception&) {
    throw Error(where + ": key \"" + key + "\" has the wrong type");
  }
}

template <typename T>
T opt(const json& j, const char* key, T fallback, const std::string& where) {
  return j.contains(key) ? req<T>(j, key, where) : fallback;
}

void positive(int v, const char* key, const std::string& where) {
  if (v <= 0) throw Error(where + ": \"" + key + "\" must be positive, got " + std::to_string(v));
}

// The decoder-shape keys shared by "vq" and "vae" (z_channels is read by the caller).
void read_conv_decoder(const json& v, const std::string& vw, ConvDecoderConfig& q) {
  q.ch = req<int>(v, "ch", vw);
  q.ch_mult = req<std::vector<int>>(v, "ch_mult", vw);
  q.num_res_blocks = req<int>(v, "num_res_blocks", vw);
  q.norm_groups = opt<int>(v, "norm_groups", 32, vw);
  q.norm_eps = opt<float>(v, "norm_eps", 1e-6f, vw);
  for (auto [val, k] : {std::pair{q.z_channels, "z_channels"},
                        {q.ch, "ch"},
                        {q.num_res_blocks, "num_res_blocks"},
                        {q.norm_groups, "norm_groups"}})
    positive(val, k, vw);
  if (q.ch_mult.empty()) throw Error(vw + ": ch_mult is empty");
}

void load_mar_config(const json& root, const std::string& where, ModelConfig& mc) {
  if (!root.contains("mar") || !root["mar"].is_object())
    throw Error(where + ": missing object \"mar\"");
  const json& m = root["mar"];
  const std::string mw = where + " mar";
  MarConfig& c = mc.mar;
  c.dim = req<int>(m, "dim", mw);
  c.encoder_depth = req<int>(m, "encoder_depth", mw);
  c.decoder_depth = req<int>(m, "decoder_depth", mw);
  c.n_head = req<int>(m, "n_head", mw);
  c.mlp_ratio = opt<float>(m, "mlp_ratio", 4.0f, mw);
  c.num_classes = req<int>(m, "num_classes", mw);
  c.buffer_size = opt<int>(m, "buffer_size", 64, mw);
  c.image_size = req<int>(m, "image_size", mw);
  c.vae_stride = opt<int>(m, "vae_stride", 16, mw);
  c.patch_size = opt<int>(m, "patch_size", 1, mw);
  c.vae_embed_dim = opt<int>(m, "vae_embed_dim", 16, mw);
  c.norm_eps = opt<float>(m, "norm_eps", 1e-6f, mw);
  c.diffloss_depth = req<int>(m, "diffloss_depth", mw);
  c.diffloss_width = req<int>(m, "diffloss_width", mw);
  c.num_train_timesteps = opt<int>(m, "num_train_timesteps", 1000, mw);
  c.num_sampling_steps = opt<int>(m, "num_sampling_steps", 100, mw);
  c.noise_schedule = opt<std::string>(m, "noise_schedule", "cosine", mw);
  c.dtype = opt<std::string>(m, "dtype", "f32", mw);
  c.file = opt<std::string>(m, "file", "mar.safetensors", mw);
  for (auto [v, k] : {std::pair{c.dim, "dim"},
                      {c.encoder_depth, "encoder_depth"},
                      {c.decoder_depth, "decoder_depth"},
                      {c.n_head, "n_head"},
                      {c.num_classes, "num_classes"},
                      {c.buffer_size, "buffer_size"},
                      {c.image_size, "image_size"},
                      {c.vae_stride, "vae_stride"},
                      {c.patch_size, "patch_size"},
                      {c.vae_embed_dim, "vae_embed_dim"},
                      {c.diffloss_depth, "diffloss_depth"},
                      {c.diffloss_width, "diffloss_width"},
                      {c.num_train_timesteps, "num_train_timesteps"},
                      {c.num_sampling_steps, "num_sampling_steps"}})
    positive(v, k, mw);
  if (c.dim % c.n_head) throw Error(mw + ": dim is not divisible by n_head");
  if (c.image_size % (c.vae_stride * c.patch_size))
    throw Error(mw + ": image_size is not divisible by vae_stride * patch_size");
  if (c.noise_schedule != "cosine" && c.noise_schedule != "linear")
    throw Error(mw + ": noise_schedule must be cosine or linear, got \"" + c.noise_schedule + "\"");
  if (c.num_sampling_steps > c.num_train_timesteps)
    throw Error(mw + ": num_sampling_steps exceeds num_train_timesteps");

  if (root.contains("vae") && !root["vae"].is_null()) {
    const json& v = root["vae"];
    const std::string vw = where + " vae";
    VaeConfig& q = mc.vae;
    mc.has_vae = true;
    q.embed_dim = req<int>(v, "embed_dim", vw);
    positive(q.embed_dim, "embed_dim", vw);
    q.z_channels = opt<int>(v, "z_channels", q.embed_dim, vw);
    read_conv_decoder(v, vw, q);
    q.attn_resolutions = opt<std::vector<int>>(v, "attn_resolutions", {}, vw);
    q.scale = opt<float>(v, "scale", 0.2325f, vw);
    q.dtype = opt<std::string>(v, "dtype", "f32", vw);
    q.file = opt<std::string>(v, "file", "vae.safetensors", vw);
    if (!(q.scale > 0.0f)) throw Error(vw + ": scale must be positive");
    if (q.embed_dim != c.vae_embed_dim)
      throw Error(vw + ": embed_dim " + std::to_string(q.embed_dim) +
                  " differs from the MAR vae_embed_dim " + std::to_string(c.vae_embed_dim));
    if (q.upsample_factor() != c.vae_stride)
      throw Error(vw + ": the decoder upsamples by " + std::to_string(q.upsample_factor()) +
                  " but the MAR config says vae_stride " + std::to_string(c.vae_stride));
  }
}

// config.json "sampling": {"cfg": F, "temperature": F, "top_k": K, "top_p": P}, all optional.
SamplingDefaults read_sampling_defaults(const json& s, const std::string& where) {
  if (!s.is_object()) throw Error(where + ": \"sampling\" must be an object");
  for (const auto& [key, value] : s.items())
    if (key != "cfg" && key != "temperature" && key != "top_k" && key != "top_p")
      throw Error(where + ": unknown key \"" + key +
                  "\" in \"sampling\" (known: cfg, temperature, top_k, top_p)");
  const std::string sw = where + " sampling";
  SamplingDefaults d;
  auto read_float = [&](const char* key, float lo, float hi, std::optional<float>& out) {
    if (!s.contains(key)) return;
    const float v = req<float>(s, key, sw);
    if (!(v >= lo && v <= hi))
      throw Error(sw + ": \"" + key + "\" must be in [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "], got " + std::to_string(v));
    out = v;
  };
  read_float("cfg", 0.0f, 1e4f, d.cfg);
  read_float("temperature", 0.0f, 1e4f, d.temperature);
  read_float("top_p", 1e-6f, 1.0f, d.top_p);
  if (s.contains("top_k")) {
    d.top_k = req<int>(s, "top_k", sw);
    if (*d.top_k < 0) throw Error(sw + ": \"top_k\" must be >= 0, got " + std::to_string(*d.top_k));
  }
  return d;
}

}  // namespace

ModelConfig load_model_config(const std::string& dir) {
  namespace fs = std::filesystem;
  ModelConfig mc;
  mc.dir = dir;
  if (!fs::is_directory(dir)) throw Error("model directory not found: " + dir);
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) throw Error("missing " + path + " (not a tessera model directory)");
  json root;
  try {
    root = json::parse(in);
  } catch (const std::exception&) {
    throw Error(path + ": invalid JSON");
  }
  const std::string where = path;
  mc.architecture = opt<std::string>(root, "architecture", "llamagen", where);
  if (mc.architecture == "mar") {
    load_mar_config(root, where, mc);
    return mc;
  }
  if (mc.architecture != "llamagen")
    throw Error(where + ": unsupported architecture \"" + mc.architecture +
                "\" (supported: llamagen, mar)");
  if (!root.contains("gpt") || !root["gpt"].is_object())
    throw Error(where + ": missing object \"gpt\"");
  const json& g = root["gpt"];
  const std::string gw = where + " gpt";
  GptConfig& c = mc.gpt;
  const std::string type = req<std::string>(g, "model_type", gw);
  if (type == "c2i")
    c.model_type = ConditionType::ClassLabel;
  else if (type == "t2i")
    c.model_type = ConditionType::Caption;
  else
    throw Error(gw + ": model_type must be c2i or t2i, got \"" + type + "\"");
  c.dim = req<int>(g, "dim", gw);
  c.n_layer = req<int>(g, "n_layer", gw);
  c.n_head = req<int>(g, "n_head", gw);
  c.n_kv_head = opt<int>(g, "n_kv_head", c.n_head, gw);
  c.ffn_dim = req<int>(g, "ffn_dim", gw);
  c.vocab_size = req<int>(g, "vocab_size", gw);
  c.cls_token_num = opt<int>(g, "cls_token_num", c.is_c2i() ? 1 : 120, gw);
  if (c.is_c2i())
    c.num_classes = req<int>(g, "num_classes", gw);
  else
    c.caption_dim = req<int>(g, "caption_dim", gw);
  c.rope_base = opt<float>(g, "rope_base", 10000.0f, gw);
  c.norm_eps = opt<float>(g, "norm_eps", 1e-5f, gw);
  c.image_size = req<int>(g, "image_size", gw);
  c.downsample = req<int>(g, "downsample", gw);
  c.grid = opt<int>(g, "grid", c.downsample > 0 ? c.image_size / c.downsample : 0, gw);
  c.dtype = opt<std::string>(g, "dtype", "f32", gw);
  c.file = opt<std::string>(g, "file", "gpt.safetensors", gw);
  for (auto [v, k] : {std::pair{c.dim, "dim"},
                      {c.n_layer, "n_layer"},
                      {c.n_head, "n_head"},
                      {c.n_kv_head, "n_kv_head"},
                      {c.ffn_dim, "ffn_dim"},
                      {c.vocab_size, "vocab_size"},
                      {c.cls_token_num, "cls_token_num"},
                      {c.image_size, "image_size"},
                      {c.downsample, "downsample"},
                      {c.grid, "grid"}})
    positive(v, k, gw);
  if (c.is_c2i())
    positive(c.num_classes, "num_classes", gw);
  else
    positive(c.caption_dim, "caption_dim", gw);
  if (c.dim % c.n_head) throw Error(gw + ": dim is not divisible by n_head");
  if (c.n_head % c.n_kv_head) throw Error(gw + ": n_head is not divisible by n_kv_head");
  if (c.head_dim() % 4)
    throw Error(gw + ": head dim " + std::to_string(c.head_dim()) +
                " is not a multiple of 4 (2D RoPE needs it)");
  if (c.grid * c.downsample != c.image_size)
    throw Error(gw + ": image_size " + std::to_string(c.image_size) + " != grid " +
                std::to_string(c.grid) + " x downsample " + std::to_string(c.downsample));
  if (root.contains("sampling")) mc.sampling = read_sampling_defaults(root["sampling"], where);

  if (root.contains("vq") && !root["vq"].is_null()) {
    const json& v = root["vq"];
    const std::string vw = where + " vq";
    VqConfig& q = mc.vq;
    mc.has_vq = true;
    q.codebook_size = req<int>(v, "codebook_size", vw);
    q.codebook_embed_dim = req<int>(v, "codebook_embed_dim", vw);
    q.codebook_l2_norm = opt<bool>(v, "codebook_l2_norm", true, vw);
    q.z_channels = req<int>(v, "z_channels", vw);
    positive(q.codebook_size, "codebook_size", vw);
    positive(q.codebook_embed_dim, "codebook_embed_dim", vw);
    read_conv_decoder(v, vw, q);
    q.dtype = opt<std::string>(v, "dtype", "f32", vw);
    q.file = opt<std::string>(v, "file", "vq.safetensors", vw);
    if (q.codebook_size != c.vocab_size)
      throw Error(vw + ": codebook_size " + std::to_string(q.codebook_size) +
                  " differs from the GPT vocab_size " + std::to_string(c.vocab_size));
    if (q.upsample_factor() != c.downsample)
      throw Error(vw + ": the decoder upsamples by " + std::to_string(q.upsample_factor()) +
                  " but the GPT config says downsample " + std::to_string(c.downsample));
  }
  return mc;
}

}  // namespace tessera
