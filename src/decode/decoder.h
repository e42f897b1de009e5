// A generation as a loop over step(): images are added (each gets its KV slots and random
// stream) and removed between steps, so a server can admit and retire requests while others are
// being decoded. Every step is one batched target forward: the prefill of the images added since
// the last step, or one decoding round (a token, or a speculative draft-and-verify round) of
// every image in flight. Subclasses: VanillaDecoder (decode/), SpeculativeDecoder (speculative/).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "decode/image_state.h"
#include "decode/session.h"
#include "sampling/sampler.h"

namespace tessera {

struct DecoderSettings {
  SamplingParams sampling;
  uint64_t seed = 0;
  int max_tokens = 0;  // > 0: an image is done after this many tokens (benchmarks)
  // Called after each step with the number of tokens it committed, over all images.
  std::function<void(int64_t)> on_tokens;
  // Vanilla decoding's device loop: tokens sampled where the logits are (sampling/sample_rows.h),
  // each step's forward, draw and counter updates replayed as one graph, tokens read back once a
  // burst. Auto: where tensors are not host memory (a GPU). On the CPU it draws the host loop's
  // tokens (the tests run it there).
  DeviceLoop device_loop = DeviceLoop::Auto;  // tessera.h
  int device_burst = 32;  // most steps one burst runs before the host reads tokens back
};

class Decoder {
 public:
  // `stats` accumulates the timing and forward counts of every step.
  Decoder(const AutoregressiveModel& model, const SessionOptions& session,
          const DecoderSettings& settings, GenerateStats& stats);
  virtual ~Decoder() = default;

  // Queues an image (prefilled by a coming step); returns its id, the lowest free one (a removed
  // image's id is reused). Its random stream is (seed, image_index), seed the settings' unless
  // given; its sampling settings the settings' unless given, which must guide (cfg > 1) and be
  // greedy (temperature 0) as the settings' are (ParameterError "sampling" otherwise). Throws
  // when no KV slot is free.
  int add(const Condition& condition, uint64_t image_index,
          std::optional<uint64_t> seed = std::nullopt,
          const std::optional<SamplingParams>& sampling = std::nullopt);
  // Whether an image with these sampling settings can join: it guides and is greedy as the
  // settings' are (they shape the batch: the unconditional slots, the drafters' trees).
  bool batches_with(const SamplingParams& sampling) const;
  // Retires an image, finished or not, and frees its slots.
  virtual void remove(int id);
  // One batched forward: the prefill of the images added since the last prefill, or a decoding
  // round of the images in flight. With both waiting they alternate, so that images arriving at
  // every step cannot starve the ones being decoded. False when there was nothing left to do.
  bool step();
  bool finished() const;  // every image added so far is done
  const ImageState& image(int id) const { return *images_.at(id); }
  int capacity_images() const;  // images that fit beside the ones held now
  int n_tokens() const { return model_.info().n_tokens; }

 protected:
  // The prefill of `fresh` (each image's first token is drawn from it).
  virtual void prefill(std::vector<ImageState*>& fresh);
  // One decoding round of the images in flight.
  virtual void round(std::vector<ImageState*>& active) = 0;
  // Draws token `index` of `im` from guided logits rows (uncond may be null).
  int32_t sample(ImageState& im, const float* cond, const float* uncond, int index);
  int image_tokens() const;  // tokens an image needs to be done
  bool cfg() const { return settings_.sampling.uses_cfg(); }

  const AutoregressiveModel& model_;
  Session session_;
  DecoderSettings settings_;
  GenerateStats& stats_;
  std::vector<std::unique_ptr<ImageState>> images_;  // by id; removed ones are null
  std::vector<float> logits_, probs_;
  bool last_prefill_ = false;  // the last step was a prefill (step() alternates)
  // The last prefill's hidden states ([slots * prefill_rows, dim], the slots as prefilled: every
  // image's conditional one, then its unconditional one) when the session returns them; valid
  // until the next forward.
  Tensor prefill_hidden_;
};

// Vanilla autoregressive sampling (LlamaGen's generate.py): one token per forward per image.
class VanillaDecoder final : public Decoder {
 public:
  VanillaDecoder(const AutoregressiveModel& model, int max_images, const DecoderSettings& settings,
                 GenerateStats& stats);
  ~VanillaDecoder() override;
  bool device_loop() const { return device_loop_; }
  int64_t graph_replays() const { return graph_replays_; }  // steps run as a replayed graph

 protected:
  void round(std::vector<ImageState*>& active) override;

 private:
  // One forward, its logits read back and sampled on the host.
  void host_round(std::vector<ImageState*>& active);
  // Up to device_burst steps on the backend: the inputs uploaded once, each step a replay, the
  // tokens read back at the end.
  void device_round(std::vector<ImageState*>& active);

  bool device_loop_ = false;
  Tensor params_;      // U8: DeviceSampleParams per image of a burst
  Tensor history_;     // I32 [max images, n_tokens]: the tokens drawn on the device
  Tensor error_flag_;  // I32 [1]: a non-finite logit (device_sample_failed)
  // A captured step per batch shape (2 x images in the burst, + 1 with a key visibility table);
  // null: capture failed or the backend records none, and the step's ops run one by one.
  GraphCache graphs_;
  int64_t graph_replays_ = 0;
  std::vector<int32_t> history_host_;
};

// Generates one token grid per condition (image i uses random stream image_indices[i]), as many
// images at a time as the decoder holds: add, step until done, collect, remove. Grids are padded
// with 0 to the model's token count (a max_tokens run). Adds images, tokens and per-image
// records to `stats` in the order of the conditions.
std::vector<std::vector<int32_t>> generate_all(Decoder& decoder,
                                               const std::vector<const Condition*>& conds,
                                               const std::vector<uint64_t>& image_indices,
                                               GenerateStats& stats);

}  // namespace tessera
