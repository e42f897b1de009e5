// Bursts of speculative rounds (speculative/chain_commit.h) against the same rounds one at a time,
// both on the device loop of the backend under test: a burst's later rounds replay the first's
// graphs with inputs its commits moved in place (on a GPU, the commit kernel and CUDA graphs),
// where a round one at a time stages them from the host. Both run the same kernels on the same
// values, so the images and statistics must be equal, bit for bit, on any backend. On the CPU
// the tests of tests/test_device_rounds.cpp compare bursts with the host loop; this is the same
// check run where the graphs and the commit kernel are real.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends_under_test.h"
#include "decode/decoder.h"
#include "models/llamagen.h"
#include "spec_analysis.h"
#include "speculative/draft_length.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"

using namespace tessera;
using namespace tessera::spec_test;
using namespace tessera::testing_backends;

namespace {

class Bursts : public BackendTest {};

struct Made {
  std::vector<std::vector<int32_t>> images;
  GenerateStats stats;
};

ModelConfig at_grid_8(const std::string& dir) {
  ModelConfig c = load_model_config(dir);
  c.gpt.image_size = (c.gpt.grid = 8) * c.gpt.downsample;
  return c;
}

// Nine images of the four-token pair at 8x8 tokens, three at a time (a class each), guided, on
// `be`'s device loop with bursts of up to `burst` rounds (1: none): the draft model's chains of 3,
// or Jacobi windows of 4 drafts (`jacobi`); `held`: --draft-len auto, each choice held for up to
// 5 rounds (the same spans either way), else the fixed length.
Made make(Backend& be, bool jacobi, bool held, int burst) {
  const ModelConfig tc = at_grid_8(kSpec + "micro_target");
  LlamaGen target(tc, be);
  LlamaGen draft(at_grid_8(kSpec + "micro_draft"), be);
  SamplingOptions so;
  so.cfg_scale = 3.0f;
  const SamplingParams p = to_sampling_params(so);
  constexpr int kBatch = 3, kImages = 9;
  speculative::ModelDrafter model_drafter(draft, p, 3, kBatch);
  speculative::JacobiDrafter jacobi_drafter(tc.gpt.vocab_size, p);
  const auto rule = speculative::make_exact_rule();
  // Costs under which the choice varies (tests/test_device_rounds.cpp's).
  speculative::RoundCosts costs;
  costs.verify = jacobi ? std::vector<double>{1.0, 1.1, 1.25, 1.45, 1.7}
                        : std::vector<double>{1.0, 1.05, 1.1, 1.15};
  costs.draft_step = jacobi ? 0.0 : 0.3;
  const speculative::DraftLengthPolicy policy(costs, jacobi ? 4 : 3, jacobi);
  speculative::LoopSettings loop;
  loop.rule = rule.get();
  loop.drafter = jacobi ? static_cast<speculative::Drafter*>(&jacobi_drafter) : &model_drafter;
  loop.draft_len = jacobi ? 5 : 3;
  if (held) {
    loop.policy = &policy;
    loop.hold_depth = 5;
  }
  DecoderSettings d;
  d.sampling = p;
  d.seed = 17;
  d.device_loop = DeviceLoop::On;
  d.device_burst = burst;
  Made out;
  speculative::SpeculativeDecoder dec(target, kBatch, d, loop, out.stats);
  const std::vector<Condition> classes = {Condition::label(0), Condition::label(1),
                                          Condition::label(2)};
  std::vector<const Condition*> conds;
  std::vector<uint64_t> index;
  for (int i = 0; i < kImages; ++i) {
    conds.push_back(&classes[static_cast<size_t>(i % 3)]);
    index.push_back(static_cast<uint64_t>(i));
  }
  out.images = generate_all(dec, conds, index, out.stats);
  return out;
}

TEST_P(Bursts, AreTheRoundsOneAtATime) {
  for (const bool jacobi : {false, true})
    for (const bool held : {false, true}) {
      SCOPED_TRACE(std::string(jacobi ? "Jacobi windows" : "draft model chains") +
                   (held ? ", auto held for 5 rounds" : ", a fixed length"));
      const Made one = make(backend(), jacobi, held, 1);
      const Made bursts = make(backend(), jacobi, held, 32);
      EXPECT_EQ(one.stats.burst_rounds, 0);
      // On the CPU: 55 of 70 rounds, 39 of 103 held; Jacobi 63 of 88, 54 of 116.
      EXPECT_GT(bursts.stats.burst_rounds, bursts.stats.device_rounds / (held ? 8 : 3));
      EXPECT_EQ(bursts.stats.device_rounds, one.stats.device_rounds);
      EXPECT_EQ(bursts.images, one.images);
      ASSERT_EQ(bursts.stats.per_image.size(), one.stats.per_image.size());
      for (size_t i = 0; i < one.stats.per_image.size(); ++i) {
        const ImageStats &a = bursts.stats.per_image[i], &b = one.stats.per_image[i];
        EXPECT_EQ(a.proposed, b.proposed) << i;
        EXPECT_EQ(a.accepted, b.accepted) << i;
        EXPECT_EQ(a.rounds_by_depth, b.rounds_by_depth) << i;
        EXPECT_EQ(a.draft_forwards, b.draft_forwards) << i;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, Bursts, ::testing::ValuesIn(kBackendNames), backend_param_name);

}  // namespace
