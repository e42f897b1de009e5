// Continuous SD's exactness proof (tests/test_cspd_loop.cpp's ExactDecisionsFollowTargetGaussians)
// re-run with both MAR models on a backend under test (issue 42, item 5: the CSpD tests on the
// GPU): every cspd-exact decision standardised by the target's test-step Gaussian as that backend
// computed it, z = (x - mu_p) / s_p, must be i.i.d. N(0, 1) (tests/cspd_exactness.h: KS of the
// pooled z, chi-square of ||z||^2 against chi^2_16; significance 1e-3 over the two), and the
// draft's own values must be rejected (the test of the test). On a GPU the MAR forwards and the
// diffusion chains run there; the acceptance and residual draws are the loop's. Labelled
// "statistical" (and "cuda" on a GPU).
#include <gtest/gtest.h>

#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "backends_under_test.h"
#include "cspd_exactness.h"
#include "decode/mar_sampler.h"
#include "speculative/continuous/cspd_loop.h"
#include "tessera/config.h"
#include "tessera/mar.h"

using namespace tessera;
using namespace tessera::cspd_test;
using namespace tessera::testing_backends;

namespace {

const std::string kMar = std::string(TESSERA_FIXTURES) + "/mar/";

class CspdStatistical : public BackendTest {};

// cspd-exact with windows of up to 3 MAR steps (8 steps: pre-fill 0-2, windows {3}, {4, 5, 6},
// {7}; 13 drafted tokens an image), guidance 2, the target's f16 copy as draft, tested at step 25
// of 50: acceptance ~0.26, so the residual sampler decides most tokens. Other seeds than the CPU
// test's.
TEST_P(CspdStatistical, ExactDecisionsFollowTargetGaussians) {
  constexpr int kImages = 400, kDrafted = 13;
  Backend& b = backend();
  const ModelConfig tc = load_model_config(kMar + "target_f32");
  const Mar target(tc, b), draft(load_model_config(kMar + "target_f16"), b);
  const GaussianDiffusion diffusion(tc.mar.num_train_timesteps, 50, tc.mar.noise_schedule);
  CspdSettings spec;
  spec.variant = cspd::Variant::Exact;
  spec.draft_len = 3;
  spec.prefill = 0.25f;
  spec.test_step = 25;
  std::vector<Token> tokens;
  spec.on_decision = record_into(tokens);
  std::vector<uint64_t> index(kImages);
  std::iota(index.begin(), index.end(), uint64_t{0});
  const PhiloxMarNoise noise(23, index);
  MarSamplingOptions sampling;
  sampling.num_iter = 8;
  sampling.cfg_scale = 2.0f;
  MarStats st;
  cspd_generate(target, draft, diffusion, b, std::vector<int>(kImages, 3), sampling, spec, noise,
                {}, st);
  ASSERT_EQ(st.drafted, int64_t{kImages} * kDrafted);
  ASSERT_EQ(tokens.size(), static_cast<size_t>(st.drafted));
  EXPECT_GT(st.accepted, st.drafted / 4);
  EXPECT_GT(st.drafted - st.accepted, st.drafted / 4) << "the residual path is exercised";
  EXPECT_EQ(st.fallbacks, 0);
  for (const Token& t : tokens)
    if (t.accepted) ASSERT_EQ(t.decided, t.x) << "an accepted draft keeps its value";
  const Exactness e =
      exactness(tokens, [&](size_t k) -> const std::vector<float>& { return tokens[k].decided; });
  const Exactness d =
      exactness(tokens, [&](size_t k) -> const std::vector<float>& { return tokens[k].x; });
  std::printf("  cspd-exact on %s: %lld tokens, acceptance %.3f; %s; draft values: %s\n",
              GetParam().c_str(), static_cast<long long>(st.drafted), st.acceptance_rate(),
              describe(e).c_str(), describe(d).c_str());
  EXPECT_GT(e.ks.p_value, 5e-4) << describe(e);
  EXPECT_GT(e.chi2.p_value, 5e-4) << describe(e);
  EXPECT_LT(d.min_p(), 1e-6) << "the draft's values pass: " << describe(d);
}

INSTANTIATE_TEST_SUITE_P(Backends, CspdStatistical, ::testing::ValuesIn(kBackendNames),
                         backend_param_name);

}  // namespace
