// Building conditions: class labels, typed prompts (encoded by Pipeline::text_condition) and T5
// caption features (from text_condition, or from a file written by LlamaGen's
// language/extract_t5_feature.py, tessera encode or similar).
#include <cstring>
#include <filesystem>

#include "io/npy.h"
#include "io/safetensors.h"
#include "tessera/tessera.h"

namespace tessera {

Condition Condition::label(int id) {
  Condition c;
  c.kind = Kind::Class;
  c.class_id = id;
  return c;
}

Condition Condition::unconditional() {
  return Condition{};
}

Condition Condition::text(std::string prompt) {
  Condition c;
  c.kind = Kind::Prompt;
  c.prompt = std::move(prompt);
  return c;
}

Condition Condition::from_caption(std::vector<float> features, int rows, int dim,
                                  const GptConfig& config) {
  check(!config.is_c2i(),
        "this model is class-conditional (c2i): condition it on a class label, not a caption");
  const int T = config.cls_token_num;
  check(dim == config.caption_dim, "caption features have width " + std::to_string(dim) +
                                       " but the model expects " +
                                       std::to_string(config.caption_dim));
  check(rows >= 1 && rows <= T, "caption features have " + std::to_string(rows) +
                                    " rows; the model takes at most " + std::to_string(T));
  check(static_cast<int64_t>(features.size()) == static_cast<int64_t>(rows) * dim,
        "internal: caption feature size");
  Condition c;
  c.kind = Kind::Caption;
  c.caption.assign(static_cast<size_t>(T) * dim, 0.0f);
  c.caption_mask.assign(T, 0);
  const int pad = T - rows;  // left padding: the real rows end at position T-1 (LlamaGen default)
  for (int r = 0; r < rows; ++r) {
    bool nonzero = false;
    for (int d = 0; d < dim; ++d) {
      const float v = features[static_cast<size_t>(r) * dim + d];
      c.caption[static_cast<size_t>(pad + r) * dim + d] = v;
      nonzero |= v != 0.0f;
    }
    c.caption_mask[pad + r] = nonzero ? 1 : 0;
  }
  bool any = false;
  for (uint8_t m : c.caption_mask) any |= m != 0;
  check(any, "caption features are all zero");
  return c;
}

Condition Condition::caption_file(const std::string& path, const GptConfig& config) {
  check(std::filesystem::exists(path), "caption file not found: " + path);
  std::vector<float> feats;
  Shape shape;
  std::vector<uint8_t> mask;
  if (path.size() > 12 && path.substr(path.size() - 12) == ".safetensors") {
    SafeTensorsFile f = SafeTensorsFile::open(path);
    const SafeTensorInfo& info = f.get("caption");
    shape = info.shape;
    feats = f.read_f32("caption");
    if (f.has("mask")) {
      const SafeTensorInfo& m = f.get("mask");
      const int64_t n = shape_numel(m.shape);
      std::vector<float> mv(static_cast<size_t>(n));
      // Tensors in a safetensors file are only byte-aligned: read integers with memcpy.
      const auto* bytes = static_cast<const unsigned char*>(m.data);
      auto read_int = [&]<typename T>(T, int64_t i) {
        T v;
        std::memcpy(&v, bytes + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
        return static_cast<float>(v);
      };
      if (m.dtype == DType::U8) {
        for (int64_t i = 0; i < n; ++i) mv[i] = bytes[i];
      } else if (m.dtype == DType::I64) {
        for (int64_t i = 0; i < n; ++i) mv[i] = read_int(int64_t{}, i);
      } else if (m.dtype == DType::I32) {
        for (int64_t i = 0; i < n; ++i) mv[i] = read_int(int32_t{}, i);
      } else {
        convert_to_f32(m.dtype, m.data, mv.data(), mv.size());
      }
      for (float v : mv) mask.push_back(v != 0.0f ? 1 : 0);
    }
  } else {
    NpyArray a = read_npy(path);
    shape = a.shape;
    feats = a.as_f32();
  }
  if (shape.size() == 3 && shape[0] == 1) shape.erase(shape.begin());
  check(shape.size() == 2,
        path + ": caption features must be [rows, dim], got " + shape_str(shape));
  const int rows = static_cast<int>(shape[0]), dim = static_cast<int>(shape[1]);
  if (!mask.empty()) {  // an explicit mask: zero the masked rows, then treat zero rows as padding
    check(static_cast<int>(mask.size()) == rows, path + ": mask has " +
                                                     std::to_string(mask.size()) + " entries for " +
                                                     std::to_string(rows) + " caption rows");
    for (int r = 0; r < rows; ++r)
      if (!mask[r])
        std::fill(feats.begin() + static_cast<int64_t>(r) * dim,
                  feats.begin() + static_cast<int64_t>(r + 1) * dim, 0.0f);
  }
  try {
    return from_caption(std::move(feats), rows, dim, config);
  } catch (const Error& e) {
    throw Error(path + ": " + e.what());
  }
}

}  // namespace tessera
