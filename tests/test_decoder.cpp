// A generation is a loop over step(): images join and leave between steps, and an image's tokens
// depend only on (models, settings, seed, image index), not on when it joined or which images
// were decoded beside it. This is the contract a server batching requests across steps needs.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "decode/decoder.h"
#include "decode/guidance.h"
#include "models/llamagen.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "tensor/backend.h"

using namespace tessera;

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

}  // namespace
