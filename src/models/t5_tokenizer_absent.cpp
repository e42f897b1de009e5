// T5Tokenizer in a build without SentencePiece (-DTESSERA_TEXT=OFF): loading one says so.
#include "models/t5_tokenizer.h"

#include "tessera/error.h"

namespace tessera {

struct T5Tokenizer::Impl {};

T5Tokenizer::T5Tokenizer(const ModelConfig&) {
  throw Error(
      "this tessera was built without text encoders (-DTESSERA_TEXT=OFF): rebuild with "
      "libsentencepiece-dev and -DTESSERA_TEXT=ON, or give caption features with --caption");
}

T5Tokenizer::~T5Tokenizer() = default;

std::vector<int32_t> T5Tokenizer::encode(const std::string&, int, bool*) const {
  return {};
}

}  // namespace tessera
