// The vanilla sampler's statistical proof (tests/test_spec_loop.cpp's
// VanillaSamplesTheTargetJointDistribution) re-run with the model's forwards on a backend under
// test: on the micro target (4 tokens, 2x2 grid: all 4^4 sequences enumerable), images sampled
// with guidance, top-k and top-p must follow the exact joint distribution computed on the CPU
// backend (Pearson chi-square, cells with expected count < 5 pooled, significance 1e-3, sized for
// power 0.9 against total variation 0.01: tests/spec_analysis.h). The sampling loop is written
// here from the engine's sampler (target distribution, counter-based uniforms, inverse CDF) over a
// Session, since Pipeline runs on the CPU backend until it can be given a device.
#include <gtest/gtest.h>

#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "backends_under_test.h"
#include "decode/session.h"
#include "models/llamagen.h"
#include "sampling/rng.h"
#include "spec_analysis.h"

using namespace tessera;
using namespace tessera::spec_test;
using namespace tessera::testing_backends;

namespace {

constexpr int kBatch = 1000;  // images per session (2000 slots with guidance)

// Images first..first+count-1 of class `cls` sampled by vanilla decoding on `b`.
void sample_vanilla(Backend& b, const ModelConfig& mc, int cls, const SamplingParams& p,
                    uint64_t seed, int first, int count, std::vector<Seq>& out) {
  LlamaGen model(mc, b);
  const int V = mc.gpt.vocab_size, N = mc.gpt.n_image_tokens();
  SessionOptions so;
  so.n_slots = 2 * kBatch;
  Session s(model, so);
  std::vector<int32_t> slots(2 * kBatch);
  for (auto& slot : slots) slot = s.acquire_slot();
  const Condition c = Condition::label(cls);
  std::vector<float> logits, probs(V);
  for (int base = first; base < first + count; base += kBatch) {
    const int B = std::min(kBatch, first + count - base);
    for (int32_t slot : slots) s.remove(slot, 0);
    std::vector<const Condition*> conds(B, &c);
    const std::span<const int32_t> used(slots.data(), 2 * B);  // B conditional, B unconditional
    s.read(s.prefill(conds, true, used).logits, logits);
    std::vector<Seq> seqs(B);
    for (int t = 0; t < N; ++t) {
      StepBatch sb;
      sb.n_new = 1;
      sb.slots.assign(used.begin(), used.end());
      sb.tokens.resize(2 * B);
      sb.positions.assign(2 * B, model.token_position(t));
      sb.output_at = {0};
      for (int i = 0; i < B; ++i) {
        const std::span<const float> cond(logits.data() + static_cast<size_t>(i) * V, V);
        const std::span<const float> uncond(logits.data() + static_cast<size_t>(B + i) * V, V);
        target_distribution(cond, p.guided(t) ? uncond : std::span<const float>{}, p.cfg_scale, p,
                            probs);
        const double u = CounterRng(seed, static_cast<uint64_t>(base + i)).uniform(t);
        const int32_t tok = sample_index(probs, u);
        seqs[i].push_back(tok);
        sb.tokens[i] = sb.tokens[B + i] = tok;
      }
      if (t + 1 < N) s.read(s.forward(sb).logits, logits);
    }
    out.insert(out.end(), seqs.begin(), seqs.end());
  }
}

class Statistical : public BackendTest {};

TEST_P(Statistical, VanillaSamplesTheTargetJointDistribution) {
  LoadOptions lo;
  lo.load_decoder = false;
  auto pipe = Pipeline::load(kSpec + "micro_target", lo);  // the exact joint, on the CPU
  const GenerateOptions o = sampling_options("vanilla");
  const int cls = 0;
  Conditionals exact(*pipe, cls, o.sampling);
  Joint joint;
  enumerate_joint(exact, {}, 1.0, pipe->config().gpt.n_image_tokens(), joint);
  const int n = samples_for(joint, kTv, kPower, kBatch);
  std::vector<Seq> samples;
  sample_vanilla(backend(), load_model_config(kSpec + "micro_target"), cls,
                 to_sampling_params(o.sampling), o.seed, 0, n, samples);
  const ChiSquare r = chi_square(joint, samples);
  const double power =
      test_stats::chi_square_power(n, r.df, std::max(0.0, kTv - r.pooled_mass), kAlpha);
  std::printf("  vanilla on %s: n %d df %d pooled mass %.4f power(TV %.2f) %.3f p %.3g\n",
              GetParam().c_str(), n, r.df, r.pooled_mass, kTv, power, r.p_value);
  EXPECT_EQ(r.impossible, 0);
  EXPECT_GT(r.df, 10);
  EXPECT_GE(power, kPower);
  EXPECT_GT(r.p_value, kAlpha) << "chi2 " << r.stat << " df " << r.df;
}

INSTANTIATE_TEST_SUITE_P(Backends, Statistical, ::testing::ValuesIn(kBackendNames),
                         backend_param_name);

}  // namespace
