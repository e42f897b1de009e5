#include "tessera/generation.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "decode/decoder.h"
#include "decode/guidance.h"
#include "pipeline/llamagen_family.h"
#include "tessera/error.h"

namespace tessera {

// Request ids are the generation's own: a finished request keeps its id until it is polled,
// while its decoder image (and that image's id) is freed as soon as it finishes.
struct Generation::Impl {
  LlamaGenFamily& family;
  SamplingDefaults defaults;  // the model's, for the settings a request leaves to it
  std::function<Condition(const std::string&)> encode_prompt;  // typed prompt -> caption
  int capacity = 1, grid = 0;
  GenerateStats stats;
  std::unique_ptr<GenerationRun> run;
  std::map<int, int> live;          // request id -> decoder image id, in flight
  std::vector<FinishedImage> done;  // finished, not polled, in the order they finished

  std::string method;  // the generation's

  Impl(LlamaGenFamily& f, const GenerateOptions& opts, int n_tokens)
      : family(f),
        capacity(std::max(opts.batch, 1)),
        grid(static_cast<int>(std::lround(std::sqrt(static_cast<double>(n_tokens))))),
        method(opts.spec.method) {
    run = family.start(opts, capacity, stats);
    stats.notes = run->notes;
  }
  // The notes of methods joined since (the run's, appended once each).
  void sync_notes() {
    for (const std::string& n : run->notes)
      if (std::find(stats.notes.begin(), stats.notes.end(), n) == stats.notes.end())
        stats.notes.push_back(n);
  }
  // Adds a request whose sampling and method were checked; returns its id.
  int add(const GenerationRequest& request, const std::optional<SamplingParams>& sampling);
  Decoder& decoder() { return run->decoder(); }
  const FinishedImage* finished(int id) const {
    for (const FinishedImage& f : done)
      if (f.id == id) return &f;
    return nullptr;
  }
  // The decoder's image of a request in flight; ParameterError("id") for any other id.
  const ImageState& in_flight(int id) {
    const auto it = live.find(id);
    check_param(it != live.end(), "id",
                "no request " + std::to_string(id) + " in flight or finished in this generation");
    return decoder().image(it->second);
  }
  int free_id() const {
    for (int id = 0;; ++id)
      if (!live.count(id) && !finished(id)) return id;
  }
};

Generation::Generation(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Generation::~Generation() = default;

int Generation::capacity() const {
  return impl_->capacity - static_cast<int>(impl_->live.size() + impl_->done.size());
}

bool Generation::joins(const GenerationRequest& request) {
  Impl& g = *impl_;
  if (request.sampling &&  // checks its ranges (ParameterError naming the setting)
      !g.decoder().batches_with(
          to_sampling_params(resolve_sampling(*request.sampling, g.defaults))))
    return false;
  if (!request.method) return true;
  const bool joins = g.run->joins(*request.method);
  g.sync_notes();
  return joins;
}

int Generation::add(const GenerationRequest& request) {
  Impl& g = *impl_;
  check_param(capacity() > 0, "capacity",
              "the generation holds " + std::to_string(g.capacity) +
                  " requests at once (its batch); poll finished ones or cancel one first");
  std::optional<SamplingParams> sampling;
  if (request.sampling)  // checks its ranges (ParameterError naming the setting)
    sampling = to_sampling_params(resolve_sampling(*request.sampling, g.defaults));
  if (request.method) {
    const std::string why = g.run->drafts_otherwise(*request.method);
    g.sync_notes();
    check_param(why.empty(), "method",
                "{method} " + request.method->method + " drafts otherwise than this generation's " +
                    g.method + " (" + why +
                    "): it needs a generation of its own (requests share one when only their "
                    "acceptance rules differ)");
  }
  const int id = g.add(request, sampling);
  if (request.method) g.run->set_method(g.live.at(id), *request.method);
  return id;
}

int Generation::Impl::add(const GenerationRequest& request,
                          const std::optional<SamplingParams>& sampling) {
  const int id = free_id();
  if (request.condition.kind == Condition::Kind::Prompt) {
    check_param(encode_prompt != nullptr, "condition", "a typed prompt needs a text encoder");
    Condition caption;
    try {
      caption = encode_prompt(request.condition.prompt);
    } catch (const ParameterError&) {
      throw;
    } catch (const Error& e) {  // no text encoder, a prompt that is not UTF-8, ...
      throw ParameterError("prompt", std::string(": ") + e.what());
    }
    live[id] = decoder().add(caption, request.image_index, request.seed, sampling);
    return id;
  }
  live[id] = decoder().add(request.condition, request.image_index, request.seed, sampling);
  return id;
}

void Generation::cancel(int id) {
  Impl& g = *impl_;
  const auto f = std::find_if(g.done.begin(), g.done.end(),
                              [id](const FinishedImage& d) { return d.id == id; });
  if (f != g.done.end()) {
    g.done.erase(f);
    return;
  }
  const auto it = g.live.find(id);
  check_param(it != g.live.end(), "id",
              "no request " + std::to_string(id) + " in flight or finished in this generation");
  g.decoder().remove(it->second);
  g.live.erase(it);
}

bool Generation::step() {
  Impl& g = *impl_;
  if (g.live.empty()) return false;
  g.decoder().step();
  // Finished requests leave the batch now, their slots free for the next add.
  for (auto it = g.live.begin(); it != g.live.end();) {
    const ImageState& im = g.decoder().image(it->second);
    if (!im.done) {
      ++it;
      continue;
    }
    g.done.push_back({it->first, im.tokens, im.stats});
    g.stats.images++;
    g.stats.tokens += static_cast<int64_t>(im.tokens.size());
    g.decoder().remove(it->second);
    it = g.live.erase(it);
  }
  return true;
}

std::vector<FinishedImage> Generation::poll() {
  std::vector<FinishedImage> out = std::move(impl_->done);
  impl_->done.clear();
  return out;
}

int Generation::in_flight() const {
  return static_cast<int>(impl_->live.size());
}

std::vector<int32_t> Generation::tokens(int id) const {
  if (const FinishedImage* f = impl_->finished(id)) return f->tokens;
  return impl_->in_flight(id).tokens;
}

ImageStats Generation::image_stats(int id) const {
  if (const FinishedImage* f = impl_->finished(id)) return f->stats;
  return impl_->in_flight(id).stats;
}

std::vector<uint8_t> Generation::preview(int id) const {
  const Impl& g = *impl_;
  std::vector<int32_t> grid = tokens(id);
  const size_t have = grid.size(), n = static_cast<size_t>(g.grid) * g.grid;
  grid.resize(n, 0);
  std::vector<uint8_t> px = g.family.decode(grid, 1);
  const int S = g.family.image_size(), cell = S / std::max(g.grid, 1);
  for (size_t t = have; t < n; ++t) {  // not generated yet: grey
    const int r = static_cast<int>(t) / g.grid, c = static_cast<int>(t) % g.grid;
    for (int y = r * cell; y < (r + 1) * cell; ++y)
      std::fill_n(px.begin() + (static_cast<size_t>(y) * S + static_cast<size_t>(c) * cell) * 3,
                  cell * 3, uint8_t{128});
  }
  return px;
}

const GenerateStats& Generation::stats() const {
  return impl_->stats;
}

std::unique_ptr<Generation> start_generation(
    LlamaGenFamily& family, const GenerateOptions& opts, int n_tokens,
    const SamplingDefaults& defaults, std::function<Condition(const std::string&)> encode_prompt) {
  auto impl = std::make_unique<Generation::Impl>(family, opts, n_tokens);
  impl->defaults = defaults;
  impl->encode_prompt = std::move(encode_prompt);
  return std::make_unique<Generation>(std::move(impl));
}

}  // namespace tessera
