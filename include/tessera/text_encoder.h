// Text encoders for typed prompts: a T5 v1.1 / flan-T5 encoder directory (tools/convert_t5.py)
// turns a prompt into the caption features a LlamaGen t2i model conditions on, as LlamaGen's
// T5Embedder does (language/t5.py: tokenize to at most the caption length, EOS appended, encode).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {

// The prompt as preprocessed; invalid UTF-8 is an error.
std::string preprocess_prompt(const std::string& prompt, TextPreprocessing how);

struct TextEncoding {
  std::vector<int32_t> ids;     // token ids, EOS included, then padding when padded
  std::vector<uint8_t> mask;    // 1 for the real tokens (EOS included), 0 for padding
  std::vector<float> features;  // [ids.size(), width]: the encoder's last hidden states
  int width = 0;
  bool truncated = false;  // the prompt had more tokens than max_length allowed
  int valid() const;       // real tokens: the number of 1s in mask
};

// The longest prompt encode() takes, in bytes (longer: ParameterError "prompt").
inline constexpr size_t kMaxPromptBytes = 4096;

class TextEncoder {
 public:
  // Loads a T5 encoder directory (config.json "architecture": "t5_encoder") onto opts.device.
  static std::unique_ptr<TextEncoder> load(const std::string& dir, const LoadOptions& opts = {});
  ~TextEncoder();

  const ModelConfig& config() const;
  int width() const;    // d_model: the width of the features
  int threads() const;  // the CPU threads, as Pipeline::threads()

  // Token ids of `text` as given (no preprocessing) with EOS, at most max_length (0: no limit).
  std::vector<int32_t> tokenize(const std::string& text, int max_length,
                                bool* truncated = nullptr) const;
  // Preprocesses, tokenizes and encodes `prompt`. pad_to > 0 pads the ids to pad_to with the pad
  // id and encodes every row with the padding keys hidden (transformers' padding="max_length"
  // with its attention mask); else only the real tokens are encoded, which gives their rows
  // the same values. An empty prompt (after preprocessing) is a ParameterError("prompt").
  // Safe to call from several threads (calls run one at a time).
  TextEncoding encode(const std::string& prompt, int max_length, TextPreprocessing how,
                      int pad_to = 0) const;

  struct Impl;

 private:
  explicit TextEncoder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
