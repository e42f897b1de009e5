// The LlamaGen (discrete-token) half of the public Pipeline: the target, its VQ decoder, and the
// draft models and heads speculative calls loaded (kept, shared by threads).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tessera/tessera.h"

namespace tessera {

class Decoder;

// One generation's decoder and everything it holds on to (method, drafter, draft-length policy):
// Pipeline::generate steps it to the end, a Generation (include/tessera/generation.h) as its
// caller asks.
struct GenerationRun {
  virtual ~GenerationRun() = default;
  virtual Decoder& decoder() = 0;
  // Whether images of method `spec` can share this run's batch: it drafts as the run's method
  // does (the same drafter, draft length, tree, rounds), only its acceptance rule differs. The
  // method is checked (ParameterError for one the model refuses) and prepared once, and its note
  // (a lossy method outside the model's validated settings) added to `notes`.
  bool joins(const SpeculativeOptions& spec) { return drafts_otherwise(spec).empty(); }
  // "" when joins(spec), else how it drafts otherwise, for the user ("a draft length of 2, not
  // 4").
  virtual std::string drafts_otherwise(const SpeculativeOptions& spec) = 0;
  // Image `id` (added, not yet prefilled) generates with `spec`, a method joins() accepted.
  virtual void set_method(int id, const SpeculativeOptions& spec) = 0;
  std::vector<std::string> notes;  // for the user (GenerateStats::notes)
};

class LlamaGenFamily {
 public:
  LlamaGenFamily(const ModelConfig& config, Backend& backend, bool load_decoder);
  ~LlamaGenFamily();

  bool has_decoder() const;
  int image_size() const;
  int64_t weight_bytes_per_step() const;
  std::vector<double> forward_seconds(int max_k, bool cfg, int repeats);
  std::vector<double> verify_seconds(int max_k, bool cfg, int repeats);
  ForwardFlops forward_flops(int k, bool cfg) const;
  std::vector<std::vector<int32_t>> generate(const std::vector<Condition>& conditions,
                                             const GenerateOptions& opts, GenerateStats* stats);
  void validate(const GenerateOptions& opts);
  // The decoder of opts' method for up to max_images images at once, accumulating into `stats`
  // (which must outlive it); on_tokens is called with the tokens each step committed.
  std::unique_ptr<GenerationRun> start(const GenerateOptions& opts, int max_images,
                                       GenerateStats& stats,
                                       std::function<void(int64_t)> on_tokens = {});
  std::vector<float> forward_logits(const Condition& condition, std::span<const int32_t> tokens);
  std::vector<float> decode_float(std::span<const int32_t> tokens, int n);
  std::vector<uint8_t> decode(std::span<const int32_t> tokens, int n);

 private:
  struct Prepared;
  struct Run;
  Prepared prepare(const GenerateOptions& opts);
  struct Data;
  std::unique_ptr<Data> d_;
};

// A Generation (tessera/generation.h) over the family's decoder for opts.
// `defaults`: the model's sampling settings, for the settings a request leaves to the model;
// `encode_prompt` turns a request's typed prompt into its caption (Pipeline::text_condition).
std::unique_ptr<Generation> start_generation(
    LlamaGenFamily& family, const GenerateOptions& opts, int n_tokens,
    const SamplingDefaults& defaults,
    std::function<Condition(const std::string&)> encode_prompt = nullptr);

}  // namespace tessera
