// T5's tokenizer: the model's own SentencePiece model (spiece.model, through the SentencePiece
// library) with HF's T5 rules: the pieces of the text, then EOS; truncation keeps EOS (HF's
// tokenizer(text, max_length=L, truncation=True): the first L - 1 pieces, then EOS).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tessera/config.h"

namespace tessera {

class T5Tokenizer {
 public:
  // Loads DIR/spiece.model (config.dir, config.t5.tokenizer_file). A file that is not a
  // SentencePiece model, or whose pieces do not fit the encoder's vocabulary or disagree with
  // its EOS and padding ids, is an error naming the file.
  explicit T5Tokenizer(const ModelConfig& config);
  ~T5Tokenizer();

  // Token ids of `text` followed by EOS, at most max_length of them (0: no limit). `truncated`
  // (when given) says whether pieces were cut.
  std::vector<int32_t> encode(const std::string& text, int max_length,
                              bool* truncated = nullptr) const;
  int eos_id() const { return eos_id_; }
  int pad_id() const { return pad_id_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int eos_id_ = 1, pad_id_ = 0;
};

}  // namespace tessera
