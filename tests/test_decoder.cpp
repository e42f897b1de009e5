// A generation is a loop over step(): images join and leave between steps, and an image's tokens
// depend only on (models, settings, seed, image index), not on when it joined or which images
// were decoded beside it. This is the contract a server batching requests across steps needs.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>

#include "counting_backend.h"
#include "decode/decoder.h"
#include "decode/guidance.h"
#include "models/kv_cache.h"
#include "models/llamagen.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "tensor/backend.h"

using namespace tessera;
using test::CountingBackend;

namespace {

const std::string kFixtures = TESSERA_FIXTURES;

struct Models {
  ModelConfig target_config = load_model_config(kFixtures + "/llamagen/c2i_f32");
  ModelConfig draft_config = load_model_config(kFixtures + "/spec/tiny_draft");
  LlamaGen target{target_config, cpu_backend()};
  LlamaGen draft{draft_config, cpu_backend()};
};

Models& models() {
  static Models m;
  return m;
}

DecoderSettings settings() {
  SamplingOptions s;
  s.cfg_scale = 3.0f;  // guided: every image holds two slots
  s.temperature = 1.0f;
  s.top_k = 50;
  DecoderSettings d;
  d.sampling = to_sampling_params(s);
  d.seed = 99;
  return d;
}

// A decoder for one method, with the drafter and rule it needs kept alive beside it.
struct MethodDecoder {
  std::unique_ptr<speculative::AcceptanceRule> rule;
  std::unique_ptr<speculative::Drafter> drafter;
  GenerateStats stats;
  std::unique_ptr<Decoder> decoder;

  MethodDecoder(const std::string& method, int max_images) {
    const DecoderSettings d = settings();
    Models& m = models();
    if (method == "vanilla") {
      decoder = std::make_unique<VanillaDecoder>(m.target, max_images, d, stats);
      return;
    }
    rule = speculative::make_exact_rule();
    speculative::LoopSettings ls;
    if (method == "sd") {
      drafter = std::make_unique<speculative::ModelDrafter>(m.draft, d.sampling, 3, max_images);
      ls.draft_len = 3;
    } else {
      drafter =
          std::make_unique<speculative::JacobiDrafter>(m.target.info().vocab_size, d.sampling);
      ls.draft_len = 4;
    }
    ls.rule = rule.get();
    ls.drafter = drafter.get();
    decoder = std::make_unique<speculative::SpeculativeDecoder>(m.target, max_images, d, ls, stats);
  }
};

std::vector<int32_t> alone(const std::string& method, int cls, uint64_t index) {
  MethodDecoder md(method, 1);
  const int id = md.decoder->add(Condition::label(cls), index);
  while (md.decoder->step()) {
  }
  return md.decoder->image(id).tokens;
}

class DecoderSteps : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderSteps, ImagesJoinAndLeaveBetweenStepsWithoutChangingResults) {
  const std::string method = GetParam();
  MethodDecoder md(method, 3);
  Decoder& dec = *md.decoder;
  const int a = dec.add(Condition::label(1), 10);
  ASSERT_TRUE(dec.step());  // a's prefill
  ASSERT_TRUE(dec.step());  // a's first round
  const int b = dec.add(Condition::label(2), 11);
  const int c = dec.add(Condition::label(3), 12);
  EXPECT_EQ(dec.capacity_images(), 0);
  EXPECT_THROW(dec.add(Condition::label(4), 13), Error);
  ASSERT_TRUE(dec.step());  // b's and c's prefill
  ASSERT_TRUE(dec.step());  // a round of a, b and c
  dec.remove(c);            // c leaves mid-flight; its slots are free again
  EXPECT_EQ(dec.capacity_images(), 1);
  const int d = dec.add(Condition::label(1), 13);  // joins in c's slots
  while (dec.step()) {
  }
  EXPECT_TRUE(dec.finished());
  EXPECT_EQ(dec.image(a).tokens, alone(method, 1, 10));
  EXPECT_EQ(dec.image(b).tokens, alone(method, 2, 11));
  EXPECT_EQ(dec.image(d).tokens, alone(method, 1, 13));
  EXPECT_EQ(dec.image(a).tokens.size(), 16u);
  EXPECT_FALSE(dec.step());  // nothing left to do
}

INSTANTIATE_TEST_SUITE_P(Methods, DecoderSteps, ::testing::Values("vanilla", "sd", "sjd"));

// The device-ready forward contract: once a generation is under way, a decoding step allocates
// nothing on the backend, writes its inputs with one transfer, and reads its logits with one
// download and one synchronize. This is what lets a device backend replay a step as a graph.
TEST(DecoderSteps, DecodingStepsAllocateNothingAndUploadOnce) {
  CountingBackend counting;
  LlamaGen target(models().target_config, counting), draft(models().draft_config, counting);
  DecoderSettings d = settings();
  for (const std::string method : {"vanilla", "sd"}) {
    SCOPED_TRACE(method);
    GenerateStats stats;
    auto rule = speculative::make_exact_rule();
    speculative::ModelDrafter drafter(draft, d.sampling, 3, 2);
    speculative::LoopSettings ls;
    ls.rule = rule.get();
    ls.drafter = &drafter;
    ls.draft_len = 3;
    std::unique_ptr<Decoder> dec;
    if (method == "vanilla")
      dec = std::make_unique<VanillaDecoder>(target, 2, d, stats);
    else
      dec = std::make_unique<speculative::SpeculativeDecoder>(target, 2, d, ls, stats);
    dec->add(Condition::label(1), 0);
    dec->add(Condition::label(2), 1);
    ASSERT_TRUE(dec->step());  // the prefill embeds the conditions (allocations allowed)
    ASSERT_TRUE(dec->step());  // a first round: the drafter's catch-up settles
    const int forwards = static_cast<int>(stats.forward_passes + stats.draft_forward_passes);
    counting.allocations = counting.uploads = counting.writes = 0;
    counting.downloads = counting.syncs = 0;
    ASSERT_TRUE(dec->step());
    ASSERT_TRUE(dec->step());
    const int steps_forwards =
        static_cast<int>(stats.forward_passes + stats.draft_forward_passes) - forwards;
    ASSERT_GT(steps_forwards, 0);
    EXPECT_EQ(counting.allocations, 0);
    EXPECT_EQ(counting.uploads, 0);
    EXPECT_EQ(counting.writes, steps_forwards);  // one packed input transfer per forward
    EXPECT_EQ(counting.downloads, steps_forwards);
    EXPECT_EQ(counting.syncs, steps_forwards);
  }
}

// The host loop's tokens for one image of class `cls` (its own sampling settings if given).
std::vector<int32_t> host_tokens(DecoderSettings d, int cls, uint64_t index,
                                 const std::optional<SamplingParams>& own = std::nullopt) {
  d.device_loop = DeviceLoop::Off;
  GenerateStats stats;
  VanillaDecoder dec(models().target, 1, d, stats);
  EXPECT_FALSE(dec.device_loop());
  const int id = dec.add(Condition::label(cls), index, std::nullopt, own);
  while (dec.step()) {
  }
  return dec.image(id).tokens;
}

// Vanilla's device loop (sampling on the backend, each step replayed, tokens read back once a
// burst) draws the host loop's tokens, bit for bit on the CPU: images joining and leaving between
// bursts, bursts cut short by the image nearest its end, an image with its own settings, guidance
// that stops mid-image (cfg_interval), greedy, top-p without guidance. With record_graphs every
// step after a batch shape's first is a replay of the ops recorded then, as a CUDA graph runs.
TEST(DeviceLoop, DrawsTheHostLoopsTokens) {
  struct Case {
    const char* name;
    float cfg, interval, temperature;
    int top_k;
    float top_p;
  };
  const Case cases[] = {{"guided, top-k", 3.0f, -1.0f, 1.0f, 50, 1.0f},
                        {"greedy", 3.0f, -1.0f, 0.0f, 0, 1.0f},
                        {"unguided, top-p", 1.0f, -1.0f, 0.9f, 0, 0.8f},
                        {"guidance stops at 5", 4.0f, 5.0f, 1.0f, 0, 1.0f}};
  for (const Case& c : cases)
    for (const bool record : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (record ? ", replayed" : ", run"));
      DecoderSettings d = settings();
      d.sampling.cfg_scale = c.cfg;
      d.sampling.cfg_interval = c.interval;
      d.sampling.temperature = c.temperature;
      d.sampling.top_k = c.top_k;
      d.sampling.top_p = c.top_p;
      d.device_loop = DeviceLoop::On;
      d.device_burst = 5;
      SamplingParams own = d.sampling;  // the same shape, other values
      if (!own.greedy()) own.temperature = 0.7f, own.top_k = 20;
      CountingBackend counting;
      counting.record_graphs = record;
      LlamaGen target(models().target_config, counting);
      GenerateStats stats;
      VanillaDecoder dec(target, 3, d, stats);
      ASSERT_TRUE(dec.device_loop());
      const int a = dec.add(Condition::label(1), 10);
      ASSERT_TRUE(dec.step());  // a's prefill
      ASSERT_TRUE(dec.step());  // a burst of a alone (5 tokens)
      const int b = dec.add(Condition::label(2), 11, std::nullopt, own);
      const int x = dec.add(Condition::label(3), 12);
      ASSERT_TRUE(dec.step());  // b's and x's prefill
      ASSERT_TRUE(dec.step());  // a burst of three
      dec.remove(x);
      const int e = dec.add(Condition::label(1), 13);
      while (dec.step()) {
      }
      EXPECT_EQ(dec.image(a).tokens, host_tokens(d, 1, 10));
      EXPECT_EQ(dec.image(b).tokens, host_tokens(d, 2, 11, own));
      EXPECT_EQ(dec.image(e).tokens, host_tokens(d, 1, 13));
      EXPECT_EQ(dec.image(a).tokens.size(), 16u);
      EXPECT_EQ(dec.graph_replays(), counting.replays);
      if (record) {
        EXPECT_GT(counting.replays, 20);
        EXPECT_LE(counting.captures, 3);  // one per batch shape: 1, 2 and 3 images
      } else {
        EXPECT_EQ(counting.replays, 0);
      }
    }
}

// A t2i caption's padding hides keys (the cache's visibility table), which exists only from the
// first such prefill: a step recorded before it, for the same number of images, must not be
// replayed after it. An unconditional image, then a captioned one, one image at a time.
TEST(DeviceLoop, AStepRecordedBeforeHiddenKeysIsNotReplayedAfter) {
  const ModelConfig t2i = load_model_config(kFixtures + "/llamagen/t2i_f32");
  const Condition caption =
      Condition::caption_file(kFixtures + "/llamagen/golden/caption.npy", t2i.gpt);
  DecoderSettings d = settings();
  d.device_burst = 5;
  // Each image's tokens by the host loop, or by the device loop with its steps recorded.
  auto tokens = [&](bool device) {
    CountingBackend counting;
    counting.record_graphs = device;
    LlamaGen target(t2i, counting);
    DecoderSettings ds = d;
    ds.device_loop = device ? DeviceLoop::On : DeviceLoop::Off;
    GenerateStats stats;
    VanillaDecoder dec(target, 1, ds, stats);
    std::vector<std::vector<int32_t>> out;
    for (const Condition& c : {Condition::unconditional(), caption}) {
      const int id = dec.add(c, out.size());
      while (dec.step()) {
      }
      out.push_back(dec.image(id).tokens);
      dec.remove(id);
    }
    EXPECT_EQ(counting.replays > 0, device);
    return out;
  };
  EXPECT_EQ(tokens(true), tokens(false));
}

// A burst of k steps moves data once: its inputs, the rows' settings and the error flag written
// (three transfers), the tokens and the flag read back with one synchronize; nothing allocated
// after the first burst. The host loop needs a transfer, a download and a synchronize per step.
TEST(DeviceLoop, ABurstMovesDataOnce) {
  CountingBackend counting;
  LlamaGen target(models().target_config, counting);
  DecoderSettings d = settings();
  d.device_loop = DeviceLoop::On;
  d.device_burst = 5;
  GenerateStats stats;
  VanillaDecoder dec(target, 2, d, stats);
  dec.add(Condition::label(1), 0);
  dec.add(Condition::label(2), 1);
  ASSERT_TRUE(dec.step());  // prefill
  ASSERT_TRUE(dec.step());  // the first burst reserves the loop's buffers
  counting.allocations = counting.uploads = counting.writes = 0;
  counting.downloads = counting.syncs = 0;
  const int64_t forwards = stats.forward_passes;
  ASSERT_TRUE(dec.step());
  EXPECT_EQ(stats.forward_passes - forwards, 5);
  EXPECT_EQ(counting.allocations, 0);
  EXPECT_EQ(counting.uploads, 0);
  EXPECT_EQ(counting.writes, 3);
  EXPECT_EQ(counting.downloads, 2);
  EXPECT_EQ(counting.syncs, 1);
}

// A KV cache compaction or copy is one row move per layer's K and V (its row pairs uploaded
// once), not one copy per layer, head and position: the tree methods' per-round cost on a GPU.
TEST(KVCacheMoves, CompactAndCopyAreOneOpPerLayerTensor) {
  CountingBackend counting;
  KVCache cache(counting, 3, 2, 16, 4, 8);
  std::vector<float> k0(static_cast<size_t>(2 * 4 * 16 * 8));
  for (size_t i = 0; i < k0.size(); ++i) k0[i] = static_cast<float>(i);
  counting.upload_into(k0.data(), cache.k(1));
  cache.set_length(0, 9);
  counting.writes = 0;
  const int keep[] = {4, 6, 7};
  cache.compact(0, 2, keep);
  EXPECT_EQ(cache.length(0), 5);
  EXPECT_EQ(counting.moves, 6);
  EXPECT_EQ(counting.copies, 0);
  EXPECT_EQ(counting.writes, 1);
  std::vector<float> k1(k0.size());
  counting.download(cache.k(1), k1.data());
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 3; ++i)  // slot 2 + i of head h holds slot keep[i]'s keys
      for (int d = 0; d < 8; ++d)
        EXPECT_EQ(k1[static_cast<size_t>((h * 16 + 2 + i) * 8 + d)],
                  k0[static_cast<size_t>((h * 16 + keep[i]) * 8 + d)]);
  cache.copy(0, 1, 5);
  EXPECT_EQ(counting.moves, 12);
  EXPECT_EQ(counting.copies, 0);
  counting.download(cache.k(1), k1.data());
  for (int h = 0; h < 4; ++h)
    for (int i = 0; i < 5; ++i)
      for (int d = 0; d < 8; ++d)
        EXPECT_EQ(k1[static_cast<size_t>(((4 + h) * 16 + i) * 8 + d)],
                  k1[static_cast<size_t>((h * 16 + i) * 8 + d)]);
}

}  // namespace
