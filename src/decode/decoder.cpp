#include "decode/decoder.h"

#include <algorithm>

#include "common/clock.h"
#include "decode/guidance.h"
#include "tessera/error.h"

namespace tessera {

Decoder::Decoder(const AutoregressiveModel& model, const SessionOptions& session,
                 const DecoderSettings& settings, GenerateStats& stats)
    : model_(model), session_(model, session), settings_(settings), stats_(stats) {}

int Decoder::image_tokens() const {
  const int N = model_.info().n_tokens;
  return settings_.max_tokens > 0 ? std::min(settings_.max_tokens, N) : N;
}

int Decoder::capacity_images() const {
  return session_.free_slots() / (cfg() ? 2 : 1);
}

int Decoder::add(const Condition& condition, uint64_t image_index, std::optional<uint64_t> seed,
                 const std::optional<SamplingParams>& sampling) {
  check(capacity_images() > 0, "internal: no free KV slot for another image");
  const SamplingParams& own = settings_.sampling;
  if (sampling) {
    check_param(sampling->uses_cfg() == own.uses_cfg(), "sampling",
                std::string("an image's guidance must be on or off as its generation's (cfg ") +
                    (own.uses_cfg() ? "> 1" : "<= 1") +
                    "): it decides the batch's unconditional slots");
    check_param((sampling->temperature <= 0.0f) == (own.temperature <= 0.0f), "sampling",
                std::string("an image must be ") + (own.temperature <= 0.0f ? "" : "not ") +
                    "greedy (temperature 0) as its generation is");
  }
  auto im = std::make_unique<ImageState>();
  const auto free = std::find(images_.begin(), images_.end(), nullptr);
  im->id = static_cast<int>(free - images_.begin());
  im->condition = condition;
  im->rng = CounterRng(seed.value_or(settings_.seed), image_index);
  im->sampling = sampling.value_or(own);
  im->slot = session_.acquire_slot();
  if (cfg()) im->uncond_slot = session_.acquire_slot();
  im->stats.accepted_depth.assign(model_.info().n_tokens, 0);
  const int id = im->id;
  if (free == images_.end())
    images_.push_back(std::move(im));
  else
    *free = std::move(im);
  return id;
}

void Decoder::remove(int id) {
  std::unique_ptr<ImageState>& im = images_.at(id);
  check(im != nullptr, "internal: image removed twice");
  session_.release_slot(im->slot);
  if (im->uncond_slot >= 0) session_.release_slot(im->uncond_slot);
  im.reset();
}

bool Decoder::finished() const {
  for (const auto& im : images_)
    if (im && !im->done) return false;
  return true;
}

bool Decoder::step() {
  const double t0 = now_s();
  std::vector<ImageState*> fresh, active;
  for (auto& im : images_)
    if (im && !im->prefilled)
      fresh.push_back(im.get());
    else if (im && !im->done)
      active.push_back(im.get());
  if (fresh.empty() && active.empty()) return false;
  last_prefill_ = !fresh.empty() && (active.empty() || !last_prefill_);
  if (last_prefill_)
    prefill(fresh);
  else
    round(active);
  stats_.seconds += now_s() - t0;
  return true;
}

int32_t Decoder::sample(ImageState& im, const float* cond, const float* uncond, int index) {
  const int V = model_.info().vocab_size;
  probs_.resize(V);
  guided_distribution(cond, uncond, V, im.sampling, index, probs_);
  return im.sampling.temperature <= 0.0f ? argmax(probs_)
                                         : sample_index(probs_, im.rng.uniform(index));
}

void Decoder::prefill(std::vector<ImageState*>& fresh) {
  const double t0 = now_s();
  const int n = static_cast<int>(fresh.size()), V = model_.info().vocab_size;
  std::vector<const Condition*> conds;
  std::vector<int32_t> slots;
  for (ImageState* im : fresh) {
    conds.push_back(&im->condition);
    slots.push_back(im->slot);
  }
  if (cfg())
    for (ImageState* im : fresh) slots.push_back(im->uncond_slot);
  const ForwardOutputs out = session_.prefill(conds, cfg(), slots);
  session_.read(out.logits, logits_);
  prefill_hidden_ = out.hidden;
  stats_.forward_passes++;
  // The first token of every method is drawn exactly as vanilla sampling draws it, from the last
  // prefix row of each slot.
  const size_t rows = static_cast<size_t>(session_.prefill_rows());
  for (int i = 0; i < n; ++i) {
    ImageState& im = *fresh[i];
    const float* c = logits_.data() + (static_cast<size_t>(i) * rows + rows - 1) * V;
    const float* u =
        cfg() ? logits_.data() + (static_cast<size_t>(n + i) * rows + rows - 1) * V : nullptr;
    im.tokens.push_back(sample(im, c, u, 0));
    im.prefilled = true;
    im.stats.tokens = 1;
    im.stats.target_forwards = 1;
    im.done = image_tokens() <= 1;
  }
  const double dt = now_s() - t0;
  stats_.prefill_seconds += dt;
  stats_.target_seconds += dt;
  if (settings_.on_tokens) settings_.on_tokens(n);
}

VanillaDecoder::VanillaDecoder(const AutoregressiveModel& model, int max_images,
                               const DecoderSettings& settings, GenerateStats& stats)
    : Decoder(model, SessionOptions{.n_slots = max_images * (settings.sampling.uses_cfg() ? 2 : 1)},
              settings, stats) {}

void VanillaDecoder::round(std::vector<ImageState*>& active) {
  const double t0 = now_s();
  const int m = static_cast<int>(active.size()), V = model_.info().vocab_size;
  StepBatch b;
  b.n_new = 1;
  b.output_at = {0};
  for (int h = 0; h < (cfg() ? 2 : 1); ++h)
    for (ImageState* im : active) {
      b.slots.push_back(h == 0 ? im->slot : im->uncond_slot);
      b.tokens.push_back(im->tokens.back());  // the sampled token is fed to both halves
      b.positions.push_back(model_.token_position(static_cast<int>(im->tokens.size()) - 1));
    }
  session_.read(session_.forward(b).logits, logits_);
  stats_.forward_passes++;
  for (int j = 0; j < m; ++j) {
    ImageState& im = *active[j];
    const float* u = cfg() ? logits_.data() + static_cast<size_t>(m + j) * V : nullptr;
    const int t = static_cast<int>(im.tokens.size());
    im.tokens.push_back(sample(im, logits_.data() + static_cast<size_t>(j) * V, u, t));
    im.round++;
    im.stats.rounds++;
    im.stats.target_forwards++;
    im.stats.tokens = static_cast<int64_t>(im.tokens.size());
    im.done = static_cast<int>(im.tokens.size()) >= image_tokens();
  }
  stats_.target_seconds += now_s() - t0;
  if (settings_.on_tokens) settings_.on_tokens(m);
}

std::vector<std::vector<int32_t>> generate_all(Decoder& decoder,
                                               const std::vector<const Condition*>& conds,
                                               const std::vector<uint64_t>& image_indices,
                                               GenerateStats& stats) {
  check(conds.size() == image_indices.size(), "internal: conditions vs image indices");
  std::vector<std::vector<int32_t>> out;
  for (size_t b0 = 0; b0 < conds.size();) {
    const size_t b1 = std::min(conds.size(), b0 + static_cast<size_t>(decoder.capacity_images()));
    check(b1 > b0, "internal: the decoder holds no image");
    std::vector<int> ids;
    for (size_t i = b0; i < b1; ++i) ids.push_back(decoder.add(*conds[i], image_indices[i]));
    while (decoder.step()) {
    }
    for (int id : ids) {
      const ImageState& im = decoder.image(id);
      std::vector<int32_t> grid = im.tokens;
      grid.resize(static_cast<size_t>(decoder.n_tokens()), 0);
      out.push_back(std::move(grid));
      stats.tokens += static_cast<int64_t>(im.tokens.size());
      stats.images++;
      stats.per_image.push_back(im.stats);
      decoder.remove(id);
    }
    b0 = b1;
  }
  return out;
}

}  // namespace tessera
