// A generation its caller steps (issue 44; what `tessera serve` runs): requests are added and
// cancelled between steps, each step is one batched target forward over every request in flight
// (the prefill of new ones, or a decoding round, a token or a speculative draft-and-verify round,
// of the others), and finished images are collected with poll(). A request's image depends only on
// its condition, seed and image index and on the generation's options, never on the requests
// batched beside it or on when it arrived (the engine's batch invariance).
//
//   auto gen = pipe->start_generation(opts);      // method, sampling, batch: opts
//   int id = gen->add({Condition::label(3), 42});  // seed 42
//   SpeculativeOptions lantern = opts.spec;        // opts' drafter, another rule
//   lantern.method = "lantern";
//   gen->add({Condition::label(5), 7, 0, std::nullopt, lantern});
//   while (gen->step())
//     for (FinishedImage& f : gen->poll()) ...;   // f.id, f.tokens, f.stats
//
// Each request may bring its own sampling settings (guidance scale, temperature, top-k, top-p) and
// its own method and parameters, and is batched with the others all the same, as long as it
// guides or not (cfg > 1) and samples greedily or not (temperature 0) as the generation's options
// do, and its method drafts as the generation's does: the same drafter (draft model, heads or
// Jacobi window), draft length, tree and rounds. So sd, lantern, cool-sd, uniform-rsd, ... with
// one draft model share every forward, each image verified by its own acceptance rule; vanilla
// shares only with vanilla. Requests that draft otherwise need another Generation (joins() tells).
// A Generation is used from one thread at a time and must not outlive its Pipeline; LlamaGen
// models only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "tessera/tessera.h"

namespace tessera {

struct GenerationRequest {
  GenerationRequest() = default;
  GenerationRequest(Condition condition_, uint64_t seed_ = 0, uint64_t image_index_ = 0,
                    std::optional<SamplingOptions> sampling_ = std::nullopt,
                    std::optional<SpeculativeOptions> method_ = std::nullopt)
      : condition(std::move(condition_)),
        seed(seed_),
        image_index(image_index_),
        sampling(std::move(sampling_)),
        method(std::move(method_)) {}

  Condition condition;
  uint64_t seed = 0;
  // The image's random stream within the seed: with seed s and index i it is the image
  // Pipeline::generate makes for a condition at position i - first_image_index with seed s.
  uint64_t image_index = 0;
  // This request's sampling settings (those left to the model take its config.json's); unset:
  // the generation's. Guidance on or off and greedy or not must be the generation's
  // (ParameterError "sampling" from add otherwise).
  std::optional<SamplingOptions> sampling;
  // This request's method and its parameters (its draft options as the generation's options
  // spell them, the model's validated settings applied); unset: the generation's. It must draft
  // as the generation's method does (ParameterError "method" from add otherwise, see joins()).
  std::optional<SpeculativeOptions> method;
};

struct FinishedImage {
  int id = 0;
  std::vector<int32_t> tokens;  // the whole grid, raster order
  ImageStats stats;
};

class Generation {
 public:
  struct Impl;
  explicit Generation(std::unique_ptr<Impl> impl);
  ~Generation();

  // Requests that can be added now (the options' batch, less the ones in flight).
  int capacity() const;
  // Whether add() puts `request` in this generation's batch: its sampling guides and is greedy as
  // the generation's is, and its method drafts as the generation's does. The method is checked
  // and its rule prepared (LANTERN's neighbour table, ...) once and kept, so later adds of it are
  // cheap. Throws what add() would for a method the model refuses on its own (an unknown method, a
  // parameter out of range: ParameterError naming it).
  bool joins(const GenerationRequest& request);
  // Queues a request (prefilled by a coming step) and returns its id: the lowest free one, so a
  // finished or cancelled request's id is reused. ParameterError("capacity") when full,
  // ParameterError("sampling") or ("method") for a request that cannot join (see joins()).
  int add(const GenerationRequest& request);
  // Drops a request in flight or finished and not yet polled, and frees its slots now; it is never
  // reported by poll. ParameterError("id") for an id that is neither.
  void cancel(int id);
  // One batched forward. Prefills and decoding rounds alternate while both are waiting, so that
  // requests arriving at every step cannot starve the ones being decoded. False when no request is
  // in flight.
  bool step();
  // The requests finished since the last poll, in the order they finished (by id within a
  // step); their ids are free.
  std::vector<FinishedImage> poll();
  // Requests added and not yet finished.
  int in_flight() const;
  // The tokens committed so far of a request in flight or finished and not yet polled (a preview
  // while it is generated). ParameterError("id") otherwise.
  std::vector<int32_t> tokens(int id) const;
  // RGB pixels [H, W, 3] of that request so far: its tokens decoded, the cells not generated yet
  // grey. Needs the model's VQ decoder.
  std::vector<uint8_t> preview(int id) const;
  // The statistics so far of a request in flight or finished and not yet polled: accepted_depth
  // covers its committed tokens (an acceptance heatmap while it is generated).
  // ParameterError("id") otherwise.
  ImageStats image_stats(int id) const;
  // Timing and forward counts of every step so far, and notes for the user (a lossy method outside
  // the model's validated settings); per_image is not filled (FinishedImage::stats has it).
  const GenerateStats& stats() const;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera
