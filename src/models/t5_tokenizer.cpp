#include "models/t5_tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "io/regular_file.h"
#include "tessera/error.h"

namespace tessera {

struct T5Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {
constexpr size_t kMaxModelBytes = size_t{64} << 20;  // T5's spiece.model: 792 KB
}  // namespace

T5Tokenizer::T5Tokenizer(const ModelConfig& config) : impl_(std::make_unique<Impl>()) {
  const T5Config& c = config.t5;
  const std::string path = (std::filesystem::path(config.dir) / c.tokenizer_file).string();
  if (!std::filesystem::exists(path)) throw Error("missing tokenizer " + path);
  const std::string bytes = read_small_file(path, kMaxModelBytes);
  const auto status = impl_->sp.LoadFromSerializedProto(bytes);
  if (!status.ok())
    throw Error(path + ": not a SentencePiece model (" + std::string(status.message()) + ")");
  const int pieces = impl_->sp.GetPieceSize();
  if (pieces > c.vocab_size)
    throw Error(path + ": the tokenizer has " + std::to_string(pieces) +
                " pieces but the encoder's vocabulary has " + std::to_string(c.vocab_size) +
                " rows: it belongs to another model");
  if (impl_->sp.eos_id() != c.eos_id || impl_->sp.pad_id() != c.pad_id)
    throw Error(path + ": the tokenizer's EOS and padding ids are " +
                std::to_string(impl_->sp.eos_id()) + " and " + std::to_string(impl_->sp.pad_id()) +
                " but config.json says " + std::to_string(c.eos_id) + " and " +
                std::to_string(c.pad_id) + ": it belongs to another model");
  eos_id_ = c.eos_id;
  pad_id_ = c.pad_id;
}

T5Tokenizer::~T5Tokenizer() = default;

std::vector<int32_t> T5Tokenizer::encode(const std::string& text, int max_length,
                                         bool* truncated) const {
  std::vector<int> pieces;
  const auto status = impl_->sp.Encode(text, &pieces);
  if (!status.ok()) throw Error("cannot tokenize the prompt: " + std::string(status.message()));
  const bool cut = max_length > 0 && static_cast<int>(pieces.size()) + 1 > max_length;
  if (cut) pieces.resize(static_cast<size_t>(std::max(max_length - 1, 0)));
  if (truncated) *truncated = cut;
  std::vector<int32_t> ids(pieces.begin(), pieces.end());
  ids.push_back(eos_id_);
  return ids;
}

}  // namespace tessera
