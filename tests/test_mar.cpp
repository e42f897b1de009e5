// MAR parity with the project's PyTorch reference (python/tessera_ref/mar.py) on tiny random-weight
// models in the official layout, converted by tools/convert_mar.py; goldens and their settings in
// tests/fixtures/mar/golden/manifest.json (python/make_mar_fixtures.py). Randomness (orders, x_T,
// per-step noise) is injected from the golden arrays, so every comparison is deterministic.
#include <gtest/gtest.h>

#include "float_compare.h"

#include <cctype>

#include <cmath>
#include <string>

#include "decode/mar_sampler.h"
#include "io/npy.h"
#include "models/kl_vae_decoder.h"
#include "models/mar.h"
#include "sampling/gaussian_diffusion.h"
#include "tensor/backend.h"
#include "tessera/mar.h"

using namespace tessera;

namespace {

const std::string kDir = std::string(TESSERA_FIXTURES) + "/mar/";
const std::string kGolden = kDir + "golden/";

std::vector<float> f32(const std::string& name) {
  return read_npy(kGolden + name).as_f32();
}
std::vector<int32_t> i32(const std::string& name) {
  return read_npy(kGolden + name).as_i32();
}

double rms(const std::vector<float>& a) {
  double s = 0;
  for (float v : a) s += static_cast<double>(v) * v;
  return std::sqrt(s / std::max<size_t>(a.size(), 1));
}

// Orders, x_T and eps from the golden arrays: orders [B, L], noise [B, L, d], eps [B, L, S, d].
class ArrayNoise final : public MarNoise {
 public:
  ArrayNoise(std::vector<int32_t> orders, std::vector<float> noise, std::vector<float> eps, int L,
             int d, int S)
      : orders_(std::move(orders)),
        noise_(std::move(noise)),
        eps_(std::move(eps)),
        L_(L),
        d_(d),
        S_(S) {}
  std::vector<int32_t> order(int image, int) const override {
    return {orders_.begin() + image * L_, orders_.begin() + (image + 1) * L_};
  }
  void start(int image, int pos, std::span<float> out) const override {
    std::copy_n(noise_.begin() + (static_cast<size_t>(image) * L_ + pos) * d_, d_, out.begin());
  }
  void step(int image, int pos, int j, std::span<float> out) const override {
    std::copy_n(eps_.begin() + ((static_cast<size_t>(image) * L_ + pos) * S_ + j) * d_, d_,
                out.begin());
  }
  double uniform(int, int, uint32_t, uint32_t) const override { return 0.5; }
  double normal(int, int, uint32_t, uint32_t) const override { return 0.0; }

 private:
  std::vector<int32_t> orders_;
  std::vector<float> noise_, eps_;
  int L_, d_, S_;
};

struct Loaded {
  ModelConfig config;
  std::unique_ptr<Mar> model;
  std::unique_ptr<GaussianDiffusion> diffusion;
};

Loaded load(const std::string& name) {
  Loaded l;
  l.config = load_model_config(kDir + name);
  l.model = std::make_unique<Mar>(l.config, cpu_backend());
  const MarConfig& c = l.config.mar;
  l.diffusion = std::make_unique<GaussianDiffusion>(c.num_train_timesteps, c.num_sampling_steps,
                                                    c.noise_schedule);
  return l;
}

}  // namespace

// The respaced cosine tables in float64 against IDDPM's (relative 1e-12: same float64 formulas).
TEST(MarDiffusion, RespacedTablesMatchReference) {
  const GaussianDiffusion g(1000, 100, "cosine");
  const NpyArray a = read_npy(kGolden + "diffusion_tables.npy");
  ASSERT_EQ(a.shape, (Shape{100, 6}));
  const std::vector<double> t = a.as_f64();
  for (int j = 0; j < 100; ++j) {
    EXPECT_EQ(g.timestep_map()[j], static_cast<int>(t[j * 6 + 0])) << j;
    const double want[5] = {t[j * 6 + 1], t[j * 6 + 2], t[j * 6 + 3], t[j * 6 + 4], t[j * 6 + 5]};
    const double got[5] = {g.betas()[j], g.alphas_cumprod()[j],
                           g.posterior_log_variance_clipped()[j], g.posterior_mean_coef1()[j],
                           g.posterior_mean_coef2()[j]};
    for (int k = 0; k < 5; ++k)
      EXPECT_NEAR(got[k], want[k], 1e-12 * std::max(1.0, std::fabs(want[k]))) << j << " " << k;
  }
  // As LTH14/mar's diffusion/respace.py: timesteps {0, 10, 20, ..., 989, 999}, beta'_0 = 4.13e-5,
  // beta'_99 ~ 0.99999.
  EXPECT_EQ(g.timestep_map()[1], 10);
  EXPECT_EQ(g.timestep_map()[6], 61);
  EXPECT_EQ(g.timestep_map()[99], 999);
  EXPECT_NEAR(g.betas()[0], 4.128e-5, 1e-7);
}

// Tokens per step for L = 256 against the reference's schedule (MAR.sample_tokens, models/mar.py).
TEST(MarSchedule, TokensPerStepMatchReference) {
  for (int iters : {64, 256, 32, 16}) {
    const std::vector<int32_t> want =
        i32("mask_schedule_L256_iter" + std::to_string(iters) + ".npy");
    const std::vector<int> lens = mask_lengths(256, iters);
    int before = 256, total = 0;
    ASSERT_EQ(want.size(), lens.size());
    for (int s = 0; s < iters; ++s) {
      const int n = s == iters - 1 ? before : before - lens[s];
      EXPECT_EQ(n, want[s]) << "iters " << iters << " step " << s;
      total += n;
      before = lens[s];
    }
    EXPECT_EQ(total, 256);
  }
  const std::vector<int> l64 = mask_lengths(256, 64);
  EXPECT_EQ(256 - l64[0], 1);  // the first 12 steps give one token each at 64 steps
  EXPECT_EQ(l64[10] - l64[11], 1);
}

// MAE forward (buffer, sparse encoder, decoder, diffusion positions): z of every position.
// Tolerance 1e-4 absolute on z of rms ~1 (f32 summation order; observed in the 1e-6 range).
TEST(MarParity, MaeForwardMatchesReference) {
  Loaded t = load("target_f32");
  const MarConfig& c = t.config.mar;
  const std::vector<float> tokens = f32("mae_tokens.npy");
  const std::vector<float> maskf = f32("mae_mask.npy");
  const std::vector<int32_t> labels = i32("mae_labels.npy");
  const int B = static_cast<int>(labels.size()), L = c.seq_len();
  std::vector<uint8_t> unknown(maskf.size());
  for (size_t i = 0; i < maskf.size(); ++i) unknown[i] = maskf[i] != 0.0f;
  std::vector<std::vector<int32_t>> all(B);
  for (auto& v : all)
    for (int i = 0; i < L; ++i) v.push_back(i);
  std::vector<float> z(static_cast<size_t>(B) * L * c.dim);
  cpu_backend().download(t.model->forward(tokens, unknown, labels, all), z.data());
  const std::vector<float> want = f32("mae_z.npy");
  EXPECT_LT(max_abs_diff(z, want), 1e-4) << "rms " << rms(want);

  std::vector<uint8_t> none(unknown.size(), 1);
  cpu_backend().download(t.model->forward(tokens, none, labels, all), z.data());
  EXPECT_LT(max_abs_diff(z, f32("mae_z_allmasked.npy")), 1e-4);
}

// One DiffLoss chain of 100 steps given fixed noise, with and without guidance; the net output at
// t = 999 and the last step's mean / log variance. Tolerances: 1e-4 on the net output, 2e-4 on
// tokens (100 steps of f32 arithmetic; observed ~1e-6).
TEST(MarParity, DiffusionChainMatchesReference) {
  Loaded t = load("target_f32");
  Backend& be = cpu_backend();
  const int N = 3, d = 16, S = 100, D = t.config.mar.dim;
  const std::vector<float> zc = f32("diff_z.npy"), zu = f32("diff_z_uncond.npy");
  const std::vector<float> xT = f32("diff_xT.npy"), eps = f32("diff_eps.npy");
  const Tensor zct = be.upload(zc.data(), DType::F32, {N, D});
  const Tensor zut = be.upload(zu.data(), DType::F32, {N, D});
  {  // raw net output at the first step
    const Tensor x = be.upload(xT.data(), DType::F32, {N, d});
    const Tensor out = t.model->head().forward(x, 999, t.model->head().embed_condition(zct));
    std::vector<float> o(N * 2 * d);
    be.download(out, o.data());
    EXPECT_LT(max_abs_diff(o, f32("diff_netout_t999.npy")), 1e-4);
  }
  auto run = [&](bool guided, float cfg, float temperature) {
    DiffusionChains ch(t.model->head(), *t.diffusion, be, zct, guided ? &zut : nullptr, cfg,
                       temperature);
    ch.x() = xT;
    ch.run(S - 1, 0, [&](int row, int j, std::span<float> out) {
      std::copy_n(eps.begin() + (static_cast<size_t>(j) * N + row) * d, d, out.begin());
    });
    return std::pair{ch.x(), std::pair{ch.mean(), ch.log_var()}};
  };
  const auto [x_cfg, last] = run(true, 3.0f, 0.9f);
  EXPECT_LT(max_abs_diff(x_cfg, f32("diff_x0_cfg.npy")), 2e-4);
  const std::vector<float> ml = f32("diff_mean_logvar_j0.npy");
  std::vector<float> mean(N * d), lv(N * d);
  for (int r = 0; r < N; ++r)
    for (int i = 0; i < d; ++i) {
      mean[r * d + i] = ml[r * 2 * d + i];
      lv[r * d + i] = ml[r * 2 * d + d + i];
    }
  EXPECT_LT(max_abs_diff(last.first, mean), 2e-4);
  EXPECT_LT(max_abs_diff(last.second, lv), 1e-4);
  EXPECT_LT(max_abs_diff(run(false, 1.0f, 1.0f).first, f32("diff_x0_nocfg.npy")), 2e-4);
}

// The AdaLN modulations computed for many timesteps in one pass (what DiffusionChains does) give
// the net the same bits as computing them step by step: the chains' speed-up changes no result.
TEST(MarDiffusion, BatchedModulationsAreBitIdentical) {
  Loaded t = load("target_f32");
  Backend& be = cpu_backend();
  const DiffusionHead& head = t.model->head();
  const int N = 3, d = 16, D = t.config.mar.dim;
  const std::vector<float> zc = f32("diff_z.npy"), xT = f32("diff_xT.npy");
  const Tensor cond = head.embed_condition(be.upload(zc.data(), DType::F32, {N, D}));
  const Tensor x = be.upload(xT.data(), DType::F32, {N, d});
  const std::vector<int> ts = {999, 640, 321, 17, 0};
  const DiffusionHead::Modulations m = head.modulations(cond, ts);
  for (int s = 0; s < static_cast<int>(ts.size()); ++s) {
    std::vector<float> one(N * 2 * d), many(N * 2 * d);
    be.download(head.forward(x, ts[s], cond), one.data());
    be.download(head.forward(x, m, s), many.data());
    for (int i = 0; i < N * 2 * d; ++i) ASSERT_EQ(one[i], many[i]) << "t " << ts[s] << " i " << i;
  }
}

// KL-16-style decoder: float output within 1e-4 of the reference (values ~[-1, 1]); uint8 pixels
// equal except where the reference value sits within 1e-3 of a rounding boundary.
TEST(MarParity, VaeDecoderMatchesReference) {
  const ModelConfig mc = load_model_config(kDir + "target_f32");
  KlVaeDecoder vae(mc, cpu_backend());
  const std::vector<float> tokens = f32("vae_tokens.npy");
  const int n = 2;
  std::vector<float> img(static_cast<size_t>(n) * 3 * vae.image_size() * vae.image_size());
  cpu_backend().download(vae.decode(tokens, n), img.data());
  const std::vector<float> want = f32("vae_image.npy");
  EXPECT_LT(max_abs_diff(img, want), 1e-4) << "rms " << rms(want);
  const std::vector<uint8_t> px = to_pixels_mar(img, n, vae.image_size(), vae.image_size());
  const std::vector<int32_t> ref = i32("vae_pixels.npy");
  ASSERT_EQ(px.size(), ref.size());
  int off = 0;
  for (size_t i = 0; i < px.size(); ++i) off += px[i] != ref[i];
  EXPECT_LE(off, static_cast<int>(px.size() / 1000)) << off << " pixels differ";
}

// The whole MAR.sample_tokens loop with injected orders and noise, for three settings and the
// draft model. Tolerance 1e-3 on tokens of rms ~1 (errors compound through steps; observed ~1e-5).
struct GenCase {
  const char* model;
  const char* golden;
  int iters;
  float cfg;
  const char* schedule;
  float temperature;
};
class MarGeneration : public ::testing::TestWithParam<GenCase> {};

TEST_P(MarGeneration, SampleTokensMatchesReference) {
  const GenCase& gc = GetParam();
  Loaded t = load(gc.model);
  const MarConfig& c = t.config.mar;
  const ArrayNoise noise(i32("gen_orders.npy"), f32("gen_noise.npy"), f32("gen_eps.npy"),
                         c.seq_len(), c.token_dim(), c.num_sampling_steps);
  const std::vector<int32_t> l = i32("gen_labels.npy");
  MarSamplingOptions s;
  s.num_iter = gc.iters;
  s.cfg_scale = gc.cfg;
  s.cfg_schedule = gc.schedule;
  s.temperature = gc.temperature;
  MarStats st;
  const auto out = mar_generate(*t.model, *t.diffusion, cpu_backend(),
                                std::vector<int>(l.begin(), l.end()), s, noise, nullptr, st);
  std::vector<float> flat;
  for (const auto& im : out) flat.insert(flat.end(), im.begin(), im.end());
  const std::vector<float> want = f32(gc.golden);
  EXPECT_LT(max_abs_diff(flat, want), 1e-3) << "rms " << rms(want);
  EXPECT_EQ(st.target_forwards, gc.iters);
}

INSTANTIATE_TEST_SUITE_P(
    Settings, MarGeneration,
    ::testing::Values(
        GenCase{"target_f32", "gen_tokens_iter4_cfg2_linear.npy", 4, 2.0f, "linear", 1.0f},
        GenCase{"target_f32", "gen_tokens_iter16_cfg1.npy", 16, 1.0f, "linear", 0.95f},
        GenCase{"target_f32", "gen_tokens_iter8_cfg3_constant.npy", 8, 3.0f, "constant", 1.0f},
        GenCase{"draft_f32", "gen_tokens_draft_iter4_cfg2_linear.npy", 4, 2.0f, "linear", 1.0f}),
    // Stable names (the golden's stem) rather than the default byte dump of the struct.
    [](const ::testing::TestParamInfo<GenCase>& info) {
      const std::string file = info.param.golden;
      std::string name = file.substr(0, file.rfind('.'));
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return name;
    });

// f16 weights (rounded by the converter) against the f32-weight golden on one MAE forward: within
// 1% of the rms of z (f16 weight rounding is ~5e-4 relative per weight).
TEST(MarParity, F16WeightsStayClose) {
  Loaded t = load("target_f16");
  const MarConfig& c = t.config.mar;
  const std::vector<float> tokens = f32("mae_tokens.npy"), maskf = f32("mae_mask.npy");
  const std::vector<int32_t> labels = i32("mae_labels.npy");
  std::vector<uint8_t> unknown(maskf.size());
  for (size_t i = 0; i < maskf.size(); ++i) unknown[i] = maskf[i] != 0.0f;
  std::vector<std::vector<int32_t>> all(labels.size());
  for (auto& v : all)
    for (int i = 0; i < c.seq_len(); ++i) v.push_back(i);
  std::vector<float> z(labels.size() * c.seq_len() * c.dim);
  cpu_backend().download(t.model->forward(tokens, unknown, labels, all), z.data());
  const std::vector<float> want = f32("mae_z.npy");
  EXPECT_LT(max_abs_diff(z, want), 0.01 * rms(want) * 4) << "rms " << rms(want);
  EXPECT_GT(max_abs_diff(z, want), 0.0);  // the f16 rounding is really there
}

// Public API: reproducible from the seed, independent of the batch size, and the pixels decode.
TEST(MarThroughPipeline, SeedReproducibleAndBatchInvariant) {
  auto p = Pipeline::load(kDir + "target_f32");
  MarGenerateOptions o;
  o.sampling.num_iter = 4;
  o.sampling.cfg_scale = 2.0f;
  o.seed = 7;
  o.batch = 3;
  const auto a = p->generate_latents({1, 2, 3}, o);
  o.batch = 1;
  const auto b = p->generate_latents({1, 2, 3}, o);
  ASSERT_EQ(a.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(a[i], b[i]) << i;
  o.seed = 8;
  EXPECT_NE(p->generate_latents({1}, o)[0], a[0]);
  const std::vector<uint8_t> px = p->decode_latents(a[0], 1);
  EXPECT_EQ(px.size(), static_cast<size_t>(p->image_size() * p->image_size() * 3));
}

// One Pipeline for both families: each model answers its own family's calls and names itself
// when asked for the other's.
TEST(MarThroughPipeline, OnePipelineForBothFamilies) {
  LoadOptions lo;
  lo.load_decoder = false;
  auto mar = Pipeline::load(kDir + "target_f32", lo);
  EXPECT_EQ(mar->architecture(), "mar");
  EXPECT_TRUE(mar->continuous_tokens());
  try {
    mar->generate({Condition::label(1)}, GenerateOptions{});
    FAIL() << "generate on a MAR model must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a MAR model"), std::string::npos) << e.what();
  }
  auto gpt = Pipeline::load(std::string(TESSERA_FIXTURES) + "/llamagen/c2i_f32", lo);
  EXPECT_EQ(gpt->architecture(), "llamagen");
  EXPECT_FALSE(gpt->continuous_tokens());
  try {
    gpt->generate_latents({1}, MarGenerateOptions{});
    FAIL() << "generate_latents on a LlamaGen model must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a LlamaGen model"), std::string::npos) << e.what();
  }
}
