// The vanilla sampler's statistical proof (tests/test_spec_loop.cpp's
// VanillaSamplesTheTargetJointDistribution) re-run with the model's forwards on a backend under
// test: on the micro target (4 tokens, 2x2 grid: all 4^4 sequences enumerable), images sampled
// with guidance, top-k and top-p must follow the exact joint distribution computed on the CPU
// backend (Pearson chi-square, cells with expected count < 5 pooled, significance 1e-3, sized for
// power 0.9 against total variation 0.01: tests/spec_analysis.h). The sampling loop is written
// here from the engine's sampler (target distribution, counter-based uniforms, inverse CDF) over a
// Session, since Pipeline runs on the CPU backend until it can be given a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends_under_test.h"
#include "decode/decoder.h"
#include "decode/session.h"
#include "models/llamagen.h"
#include "sampling/rng.h"
#include "sampling/sample_rows.h"
#include "spec_analysis.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "speculative/tree_spec.h"

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

class Statistical : public BackendTest {
 protected:
  // The micro target's exact joint distribution for class kClass (computed on the CPU), and the
  // number of images that gives the chi-square test its power.
  void SetUp() override {
    BackendTest::SetUp();
    if (IsSkipped()) return;
    LoadOptions lo;
    lo.load_decoder = false;
    auto pipe = Pipeline::load(kSpec + "micro_target", lo);
    Conditionals exact(*pipe, kClass, options.sampling);
    enumerate_joint(exact, {}, 1.0, pipe->config().gpt.n_image_tokens(), joint);
    n = samples_for(joint, kTv, kPower, kBatch);
  }
  // The verdict on `samples`, printed with `what`.
  void expect_exact(const std::vector<Seq>& samples, const std::string& what) const {
    const ChiSquare r = chi_square(joint, samples);
    const double power =
        test_stats::chi_square_power(n, r.df, std::max(0.0, kTv - r.pooled_mass), kAlpha);
    std::printf("  %s on %s: n %d df %d pooled mass %.4f power(TV %.2f) %.3f p %.3g\n",
                what.c_str(), GetParam().c_str(), n, r.df, r.pooled_mass, kTv, power, r.p_value);
    EXPECT_EQ(r.impossible, 0);
    EXPECT_GT(r.df, 10);
    EXPECT_GE(power, kPower);
    EXPECT_GT(r.p_value, kAlpha) << "chi2 " << r.stat << " df " << r.df;
  }

  // sd with the micro draft model (a chain, or `tree`), or sjd (jacobi: windows of 3).
  void expect_device_rounds_exact(bool jacobi, std::optional<speculative::TreeSpec> tree,
                                  uint64_t seed, const std::string& what);

  static constexpr int kClass = 0;
  const GenerateOptions options = sampling_options("vanilla");
  Joint joint;
  int n = 0;
};

TEST_P(Statistical, VanillaSamplesTheTargetJointDistribution) {
  std::vector<Seq> samples;
  sample_vanilla(backend(), load_model_config(kSpec + "micro_target"), kClass,
                 to_sampling_params(options.sampling), options.seed, 0, n, samples);
  expect_exact(samples, "vanilla");
}

// The same proof with the tokens drawn where the logits are: VanillaDecoder's device loop on the
// backend under test (sampling/sample_rows.h; on a GPU the CUDA sampling kernel, each step a
// replayed graph), images 0..n-1 through generate_all.
TEST_P(Statistical, DeviceLoopSamplesTheTargetJointDistribution) {
  LlamaGen model(load_model_config(kSpec + "micro_target"), backend());
  DecoderSettings d;
  d.sampling = to_sampling_params(options.sampling);
  d.seed = options.seed + 1;  // other draws than the host loop's proof above
  d.device_loop = DeviceLoop::On;
  GenerateStats stats;
  VanillaDecoder dec(model, kBatch, d, stats);
  const Condition c = Condition::label(kClass);
  std::vector<const Condition*> conds(static_cast<size_t>(n), &c);
  std::vector<uint64_t> index(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) index[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  expect_exact(generate_all(dec, conds, index, stats),
               "device loop (" + std::to_string(dec.graph_replays()) + " steps replayed)");
  if (!backend().host_memory()) {
    EXPECT_GT(dec.graph_replays(), 0) << "no step ran as a graph";
  }
}

// Speculative decoding's proof with the rounds verified where the logits are (issue 42): sd with
// the micro draft model (depth 2: chains, or a tree) or sjd's windows, the models on the backend
// under test, every round's target distributions and walks run by the backend
// (speculative/backend_verifier.h; on a GPU the distribution and verification kernels) and only
// the verdicts (with sjd's carry-over draws) read back.
void Statistical::expect_device_rounds_exact(bool jacobi, std::optional<speculative::TreeSpec> tree,
                                             uint64_t seed, const std::string& what) {
  const ModelConfig tc = load_model_config(kSpec + "micro_target");
  LlamaGen target(tc, backend());
  LlamaGen draft(load_model_config(kSpec + "micro_draft"), backend());
  const SamplingParams p = to_sampling_params(options.sampling);
  speculative::ModelDrafter model_drafter(draft, p, 2, kBatch, std::move(tree));
  speculative::JacobiDrafter jacobi_drafter(tc.gpt.vocab_size, p);
  const std::unique_ptr<speculative::AcceptanceRule> rule = speculative::make_exact_rule();
  speculative::LoopSettings loop;
  loop.rule = rule.get();
  loop.drafter = jacobi ? static_cast<speculative::Drafter*>(&jacobi_drafter) : &model_drafter;
  loop.draft_len = jacobi ? 3 : 2;
  DecoderSettings d;
  d.sampling = p;
  d.seed = seed;
  d.device_loop = DeviceLoop::On;
  GenerateStats stats;
  speculative::SpeculativeDecoder dec(target, kBatch, d, loop, stats);
  const Condition c = Condition::label(kClass);
  std::vector<const Condition*> conds(static_cast<size_t>(n), &c);
  std::vector<uint64_t> index(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) index[static_cast<size_t>(i)] = static_cast<uint64_t>(i);
  const std::vector<Seq> samples = generate_all(dec, conds, index, stats);
  EXPECT_EQ(stats.device_rounds, stats.forward_passes - (n + kBatch - 1) / kBatch)
      << "every round after a prefill verified on the backend";
  EXPECT_GT(stats.mean_accepted_length(), jacobi ? 1.05 : 1.2) << "drafts accepted";
  expect_exact(samples, what + ", device rounds (" + std::to_string(stats.device_rounds) + ")");
}

TEST_P(Statistical, SdDeviceRoundsSampleTheTargetJointDistribution) {
  expect_device_rounds_exact(false, std::nullopt, options.seed + 2,
                             "sd");  // other draws than above
}

// A static tree (two children per node, drawn without replacement): the siblings tested after a
// rejection, against the residual and q without the rejected token, on the backend.
TEST_P(Statistical, SdTreeDeviceRoundsSampleTheTargetJointDistribution) {
  expect_device_rounds_exact(false, speculative::load_tree_spec("kary:2,2"), options.seed + 3,
                             "sd tree kary:2,2");
}

// sjd's windows: the carry-over draws made on the backend beside the walk, their q left there as
// rows of the round's target distributions (JacobiDrafter, TargetRound::carried).
TEST_P(Statistical, SjdDeviceRoundsSampleTheTargetJointDistribution) {
  expect_device_rounds_exact(true, std::nullopt, options.seed + 4, "sjd");
}

INSTANTIATE_TEST_SUITE_P(Backends, Statistical, ::testing::ValuesIn(kBackendNames),
                         backend_param_name);

}  // namespace

namespace {

// sample_rows on the backend under test draws the CPU's tokens, and so does draw_rows from
// distribution_rows' rows there: every rule (greedy, temperature, top-k, top-p, guidance,
// guidance stopped by cfg_interval) at vocabularies up to the device kernel's largest, written to
// the token, its CFG twin and the history, the rows' token index advanced, two steps in a row. The
// device sums in another order, so a draw within ~1e-6 of a boundary could differ; none of these
// does. A non-finite logit: the CPU throws, a device flags.
class Sampling : public BackendTest {};

struct SampledRows {
  std::vector<int32_t> tokens, history;
  std::vector<DeviceSampleParams> params;
};

// Two steps of sample_rows, or (from_distributions) of distribution_rows then draw_rows.
SampledRows sample_twice(Backend& b, const std::vector<float>& cond,
                         const std::vector<float>& uncond, std::vector<DeviceSampleParams> ps,
                         int V, int stride, bool from_distributions = false) {
  const int n = static_cast<int>(ps.size());
  Tensor c = b.upload(cond.data(), DType::F32, {n, V});
  Tensor u = b.upload(uncond.data(), DType::F32, {n, V});
  Tensor params = b.upload(ps.data(), DType::U8, {static_cast<int64_t>(n * sizeof(ps[0]))});
  std::vector<int32_t> init(static_cast<size_t>(n) * stride, -1);
  SampleRowsOut o;
  o.tokens = b.upload(init.data(), DType::I32, {2 * n});
  o.mirror = n;
  o.history = b.upload(init.data(), DType::I32, {n, stride});
  o.history_stride = stride;
  o.advance = true;
  const int32_t zero = 0;
  Tensor flag = b.upload(&zero, DType::I32, {1});
  SampledRows r;
  Tensor probs = b.empty(DType::F32, {n, V});
  for (int step = 0; step < 2; ++step) {
    if (from_distributions) {
      distribution_rows(b, c, &u, n, params, probs, flag);
      draw_rows(b, probs, n, params, o, flag);
    } else {
      sample_rows(b, c, &u, n, params, o, flag);
    }
    std::vector<int32_t> t(2 * static_cast<size_t>(n));
    b.download(o.tokens, t.data());
    r.tokens.insert(r.tokens.end(), t.begin(), t.end());
  }
  r.history.resize(init.size());
  b.download(o.history, r.history.data());
  r.params.resize(ps.size());
  b.download(params, r.params.data());
  int32_t failed = 0;
  b.download(flag, &failed);
  EXPECT_EQ(failed, 0);
  return r;
}

// One row's settings (image `image` of seed 7, its token `token`).
DeviceSampleParams row_params(float cfg, float interval, float temperature, int top_k, float top_p,
                              uint64_t image, uint32_t token) {
  SamplingParams p;
  p.cfg_scale = cfg;
  p.cfg_interval = interval;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return device_sample_params(p, 7, image, token);
}

// A row for each sampling rule, alone and together (images 3, 4, ... of seed 7).
std::vector<DeviceSampleParams> every_rule_rows() {
  std::vector<DeviceSampleParams> ps;
  auto row = [&](float cfg, float interval, float temperature, int top_k, float top_p,
                 uint32_t token) {
    ps.push_back(row_params(cfg, interval, temperature, top_k, top_p, ps.size() + 3, token));
  };
  row(1.0f, -1.0f, 0.0f, 0, 1.0f, 0);   // greedy
  row(3.0f, -1.0f, 0.0f, 0, 1.0f, 4);   // greedy, guided
  row(3.0f, -1.0f, 1.0f, 0, 1.0f, 1);   // guided
  row(1.0f, -1.0f, 0.8f, 10, 1.0f, 2);  // top-k
  row(1.0f, -1.0f, 1.0f, 0, 0.7f, 3);   // top-p
  row(4.0f, 2.0f, 1.0f, 0, 1.0f, 5);    // guidance stopped (loop index 4 > 2)
  row(4.0f, 2.0f, 1.0f, 0, 1.0f, 2);    // ... not yet (loop index 1)
  row(2.0f, -1.0f, 1.3f, 50, 0.9f, 0);  // all at once
  return ps;
}

TEST_P(Sampling, SampleRowsDrawTheCpusTokens) {
  std::mt19937 g(5);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int V : {256, 1000, kMaxDeviceSampleVocab}) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    const std::vector<DeviceSampleParams> ps = every_rule_rows();
    const int n = static_cast<int>(ps.size()), stride = 8;
    std::vector<float> cond(static_cast<size_t>(n) * V), uncond(cond.size());
    for (float& x : cond) x = normal(g);
    for (float& x : uncond) x = normal(g);
    const SampledRows want = sample_twice(ref(), cond, uncond, ps, V, stride);
    // sample_rows, and draw_rows from distribution_rows' rows (the device draft chain's draw).
    for (const bool from_distributions : {false, true}) {
      SCOPED_TRACE(from_distributions ? "draw_rows" : "sample_rows");
      const SampledRows got =
          sample_twice(backend(), cond, uncond, ps, V, stride, from_distributions);
      EXPECT_EQ(got.tokens, want.tokens);
      EXPECT_EQ(got.history, want.history);
      for (int r = 0; r < n; ++r)
        EXPECT_EQ(got.params[r].token_index, ps[r].token_index + 2) << "row " << r;
    }
    for (int r = 0; r < n; ++r)
      EXPECT_EQ(want.params[r].token_index, ps[r].token_index + 2) << "row " << r;
    // The twin half and the history hold each step's token.
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(want.tokens[r], want.tokens[n + r]);
      EXPECT_EQ(want.history[r * stride + ps[r].token_index], want.tokens[r]);
      EXPECT_EQ(want.history[r * stride + ps[r].token_index + 1], want.tokens[2 * n + r]);
    }
  }
}

// distribution_rows on the backend under test gives the CPU's target distributions (speculative
// verification reads them on the device, issue 42): the same rules as SampleRowsDrawTheCpusTokens,
// every row summing to 1, the same tokens filtered out (zero), each probability within 2e-6 of
// the CPU's plus 1e-4 relative (expf and a block-wide double sum instead of libmvec's exp and a
// float sum in order); bit-equal on the second CPU backend.
TEST_P(Sampling, DistributionRowsAreTheCpus) {
  std::mt19937 g(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (const int V : {256, 1000, kMaxDeviceSampleVocab}) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    std::vector<DeviceSampleParams> ps;
    auto row = [&](float cfg, float interval, float temperature, int top_k, float top_p,
                   uint32_t token) {
      ps.push_back(row_params(cfg, interval, temperature, top_k, top_p, ps.size(), token));
    };
    row(1.0f, -1.0f, 0.0f, 0, 1.0f, 0);   // greedy: one-hot
    row(3.0f, -1.0f, 1.0f, 0, 1.0f, 1);   // guided
    row(1.0f, -1.0f, 0.8f, 10, 1.0f, 2);  // top-k
    row(1.0f, -1.0f, 1.0f, 0, 0.7f, 3);   // top-p
    row(4.0f, 2.0f, 1.0f, 0, 1.0f, 5);    // guidance stopped
    row(2.0f, -1.0f, 1.3f, 50, 0.9f, 0);  // all at once
    const int n = static_cast<int>(ps.size());
    std::vector<float> cond(static_cast<size_t>(n) * V), uncond(cond.size());
    for (float& x : cond) x = normal(g);
    for (float& x : uncond) x = normal(g);
    auto run = [&](Backend& b) {
      Tensor c = b.upload(cond.data(), DType::F32, {n, V});
      Tensor u = b.upload(uncond.data(), DType::F32, {n, V});
      Tensor params = b.upload(ps.data(), DType::U8, {static_cast<int64_t>(n * sizeof(ps[0]))});
      std::vector<float> out(cond.size(), -1.0f);
      Tensor probs = b.upload(out.data(), DType::F32, {n, V});
      const int32_t zero = 0;
      Tensor flag = b.upload(&zero, DType::I32, {1});
      distribution_rows(b, c, &u, n, params, probs, flag);
      b.download(probs, out.data());
      int32_t failed = 1;
      b.download(flag, &failed);
      EXPECT_EQ(failed, 0);
      return out;
    };
    const std::vector<float> want = run(ref()), got = run(backend());
    if (exact_backend(GetParam())) {
      EXPECT_EQ(got, want);
      continue;
    }
    for (int r = 0; r < n; ++r) {
      double total = 0.0;
      for (int i = 0; i < V; ++i) {
        const size_t k = static_cast<size_t>(r) * V + i;
        total += got[k];
        ASSERT_EQ(got[k] == 0.0f, want[k] == 0.0f) << "row " << r << " token " << i;
        ASSERT_NEAR(got[k], want[k], 2e-6 + 1e-4 * want[k]) << "row " << r << " token " << i;
      }
      EXPECT_NEAR(total, 1.0, 1e-5) << "row " << r;
    }
  }
}

TEST_P(Sampling, NonFiniteLogitsAreReported) {
  Backend& b = backend();
  const int V = 64;
  std::vector<float> logits(V, 0.5f);
  logits[9] = std::nanf("");
  std::vector<DeviceSampleParams> ps = {device_sample_params(SamplingParams{}, 1, 0, 0)};
  Tensor c = b.upload(logits.data(), DType::F32, {1, V});
  Tensor params = b.upload(ps.data(), DType::U8, {static_cast<int64_t>(sizeof(ps[0]))});
  SampleRowsOut o;
  const int32_t init[1] = {-1};
  o.tokens = b.upload(init, DType::I32, {1});
  const int32_t zero = 0;
  Tensor flag = b.upload(&zero, DType::I32, {1});
  if (b.host_memory()) {
    EXPECT_THROW(sample_rows(b, c, nullptr, 1, params, o, flag), Error);
    return;
  }
  sample_rows(b, c, nullptr, 1, params, o, flag);
  int32_t failed = 0, token = -1;
  b.download(flag, &failed);
  b.download(o.tokens, &token);
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(token, 0);
}

TEST_P(Sampling, NonFiniteLogitsInDistributionsAreReported) {
  Backend& b = backend();
  const int V = 64;
  std::vector<float> logits(V, 0.5f);
  logits[9] = std::nanf("");
  std::vector<DeviceSampleParams> ps = {device_sample_params(SamplingParams{}, 1, 0, 3)};
  Tensor c = b.upload(logits.data(), DType::F32, {1, V});
  Tensor params = b.upload(ps.data(), DType::U8, {static_cast<int64_t>(sizeof(ps[0]))});
  Tensor probs = b.upload(logits.data(), DType::F32, {1, V});
  const int32_t zero = 0;
  Tensor flag = b.upload(&zero, DType::I32, {1});
  if (b.host_memory()) {
    try {
      distribution_rows(b, c, nullptr, 1, params, probs, flag);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("non-finite logits (NaN or Inf) at image token 3"),
                std::string::npos)
          << e.what();
    }
    return;
  }
  distribution_rows(b, c, nullptr, 1, params, probs, flag);
  int32_t failed = 0;
  b.download(flag, &failed);
  EXPECT_EQ(failed, 1);
  std::vector<float> out(V, -1.0f);
  b.download(probs, out.data());
  EXPECT_EQ(out, std::vector<float>(V, 0.0f));
}

// top_rows (Medusa's candidates ranked where the logits are): each row's k ids with mass, best
// first, ties to the lower id, -1 past them, with their probabilities (0 past them); the same on
// every backend (no arithmetic, only comparisons), against a sort written here; and as a
// forward's inputs (0 for -1). Rows with many
// ties, few tokens with mass, none, and vocabularies that are not a multiple of a block.
TEST_P(Sampling, TopRowsRankInArgmaxOrder) {
  std::mt19937 g(3);
  for (const int V : {7, 1000, kMaxDeviceSampleVocab + 5}) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    const int n = 5, k = 9;
    std::vector<float> probs(static_cast<size_t>(n) * V, 0.0f);
    std::uniform_int_distribution<int> level(0, 3), at(0, V - 1);
    for (int i = 0; i < V; ++i) {
      probs[i] = 0.25f * static_cast<float>(level(g));  // row 0: four levels, ties, zeros
      probs[V + i] = std::ldexp(1.0f, -(i % 40));       // row 1: ties every 40 ids
    }
    for (int j = 0; j < 3; ++j) probs[2 * V + at(g)] = 0.5f;  // row 2: 1-3 ids with mass
    probs[4 * V + V - 1] = 1.0f;  // row 3: none; row 4: only the last id
    std::vector<int32_t> want(static_cast<size_t>(n) * k, -1);
    std::vector<float> want_mass(want.size(), 0.0f);
    for (int r = 0; r < n; ++r) {
      const float* p = probs.data() + static_cast<size_t>(r) * V;
      std::vector<int> order;
      for (int i = 0; i < V; ++i)
        if (p[i] > 0.0f) order.push_back(i);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
      for (int j = 0; j < k && j < static_cast<int>(order.size()); ++j) {
        want[r * k + j] = order[j];
        want_mass[r * k + j] = p[order[j]];
      }
    }
    Backend& b = backend();
    Tensor t = b.upload(probs.data(), DType::F32, {n, V});
    std::vector<int32_t> got(want.size(), -7);
    Tensor ids = b.upload(got.data(), DType::I32, {static_cast<int64_t>(got.size())});
    top_rows(b, t, n, k, ids);
    b.download(ids, got.data());
    EXPECT_EQ(got, want);
    // With their mass: the same ids, and each one's probability.
    std::vector<float> got_mass(want.size(), -7.0f);
    std::fill(got.begin(), got.end(), -7);
    b.upload_into(got.data(), ids);
    Tensor mass = b.upload(got_mass.data(), DType::F32, {static_cast<int64_t>(got_mass.size())});
    top_rows(b, t, n, k, ids, &mass);
    b.download(ids, got.data());
    b.download(mass, got_mass.data());
    EXPECT_EQ(got, want);
    EXPECT_EQ(got_mass, want_mass);
    // With the inputs' copy (Medusa's tokens on the device loop): 0 in place of -1.
    std::vector<int32_t> got_inputs(want.size(), -7);
    Tensor inputs = b.upload(got_inputs.data(), DType::I32, {static_cast<int64_t>(want.size())});
    top_rows(b, t, n, k, ids, nullptr, &inputs);
    b.download(ids, got.data());
    b.download(inputs, got_inputs.data());
    EXPECT_EQ(got, want);
    for (size_t j = 0; j < want.size(); ++j) EXPECT_EQ(got_inputs[j], std::max(want[j], 0)) << j;
    EXPECT_EQ(want[3 * k], -1);
    EXPECT_EQ(want[4 * k], V - 1);
  }
}

// draw_children_rows (a static tree's children drawn without replacement where the distributions
// are): each child from its parent's distribution without the tokens of the children before it,
// renormalised, and its q row that distribution; greedy children are the ranks in argmax's order;
// -1 once no token has mass (0 in the inputs' copy). Against the host trees' arithmetic written
// here (normalise, sample_index, CounterRng): the CPU bit for bit, a device to 1e-6 in q (sums in
// another order).
TEST_P(Sampling, DrawChildrenRowsDrawWithoutReplacement) {
  std::mt19937 g(11);
  for (const int V : {7, 1000}) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    const int n = 4, k = 4;
    std::vector<float> probs(static_cast<size_t>(n) * V, 0.0f);
    std::uniform_real_distribution<float> w(0.0f, 1.0f);
    for (int i = 0; i < V; ++i) probs[i] = w(g);     // row 0: every token
    probs[V + 1] = 0.25f, probs[V + V - 1] = 0.75f;  // row 1: two tokens, then -1
    for (int i = 0; i < V; ++i) probs[2 * V + i] = static_cast<float>(i % 3);  // row 2: ties
    probs[3 * V + 3 % V] = 1.0f;                                               // row 3: one token
    for (int r : {0, 2}) normalise({probs.data() + static_cast<size_t>(r) * V, size_t(V)});
    std::vector<DeviceSampleParams> ps(static_cast<size_t>(n) * k);
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        SamplingParams sp;
        sp.temperature = r == 2 ? 0.0f : 1.0f;  // row 2 greedy: its ranks
        DeviceSampleParams& d = ps[r * k + c];
        d = device_sample_params(sp, 77, static_cast<uint64_t>(r), static_cast<uint32_t>(10 + c));
        d.stream = static_cast<uint32_t>(c);
      }
    // The host trees' draws.
    std::vector<int32_t> want(static_cast<size_t>(n) * k, -1);
    std::vector<float> want_q(static_cast<size_t>(n) * k * V, 0.0f);
    for (int r = 0; r < n; ++r) {
      std::vector<float> work(probs.begin() + r * V, probs.begin() + (r + 1) * V);
      for (int c = 0; c < k; ++c) {
        if (c > 0) {
          work[want[r * k + c - 1]] = 0.0f;
          if (!normalise(work)) break;
        }
        const DeviceSampleParams& d = ps[r * k + c];
        want[r * k + c] =
            r == 2 ? argmax(work)
                   : sample_index(
                         work, CounterRng(d.seed, d.image_index).uniform(d.token_index, d.stream));
        std::copy(work.begin(), work.end(), want_q.begin() + (r * k + c) * V);
      }
    }
    EXPECT_EQ(want[1 * k + 2], -1);
    EXPECT_EQ(want[3 * k + 1], -1);
    Backend& b = backend();
    Tensor t = b.upload(probs.data(), DType::F32, {n, V});
    Tensor params = b.upload(ps.data(), DType::U8,
                             {static_cast<int64_t>(ps.size() * sizeof(DeviceSampleParams))});
    Tensor q = b.zeros(DType::F32, {n * k, V});
    Tensor tokens = b.zeros(DType::I32, {n * k});
    // The tokens as a forward's inputs too: 0 in place of -1 (a padding row's token).
    std::vector<int32_t> stale(want.size(), 12345);
    Tensor inputs = b.upload(stale.data(), DType::I32, {n * k});
    draw_children_rows(b, t, n, k, params, q, tokens, &inputs);
    std::vector<int32_t> got(want.size()), got_inputs(want.size());
    b.download(tokens, got.data());
    b.download(inputs, got_inputs.data());
    const std::vector<float> got_q = download_f32(b, q);
    EXPECT_EQ(got, want);
    for (size_t c = 0; c < want.size(); ++c) EXPECT_EQ(got_inputs[c], std::max(want[c], 0)) << c;
    // A child without a token has a zero q row (the walk never reads it; defined all the same).
    for (size_t c = 0; c < want.size(); ++c) {
      if (want[c] >= 0) continue;
      for (int y = 0; y < V; ++y) ASSERT_EQ(got_q[c * V + y], 0.0f) << "child " << c;
    }
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k && want[r * k + c] >= 0; ++c) {
        for (int y = 0; y < V; ++y)
          ASSERT_NEAR(got_q[(r * k + c) * V + y], want_q[(r * k + c) * V + y], 1e-6)
              << "row " << r << " child " << c << " token " << y;
        EXPECT_GT(got_q[(r * k + c) * V + want[r * k + c]], 0.0f);  // drawn from its q
        for (int e = 0; e < c; ++e)  // without the children before it
          EXPECT_EQ(got_q[(r * k + c) * V + want[r * k + e]], 0.0f);
      }
  }
}

// row_square_sums (Hawk's node confidences, Σ q² of each slot's row) gives the CPU's sums: rows
// spread and peaked, a one-hot and an all-zero one, at vocabularies up to the device kernel's
// largest; within 1e-12 relative (a block-wide double sum against the CPU's sum in order),
// bit-equal on the second CPU backend.
TEST_P(Sampling, RowSquareSumsAreTheCpus) {
  std::mt19937 g(23);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (const int V : {7, 1000, kMaxDeviceSampleVocab}) {
    SCOPED_TRACE("vocabulary " + std::to_string(V));
    const int n = 5;
    std::vector<float> rows(static_cast<size_t>(n) * V, 0.0f);
    for (int r = 0; r < 3; ++r) {
      float* q = rows.data() + static_cast<size_t>(r) * V;
      double total = 0.0;
      for (int y = 0; y < V; ++y) total += q[y] = r == 2 ? std::pow(u(g), 12.0f) : u(g);
      for (int y = 0; y < V; ++y) q[y] = static_cast<float>(q[y] / total);
    }
    rows[static_cast<size_t>(3) * V + V / 2] = 1.0f;  // one-hot; row 4 all zero
    std::vector<double> got(n), want(n);
    for (Backend* be : {&ref(), &backend()}) {
      const Tensor probs = be->upload(rows.data(), DType::F32, {n, V});
      Tensor sums = be->empty(DType::F64, {n});
      row_square_sums(*be, probs, n, sums);
      be->download(sums, (be == &ref() ? want : got).data());
    }
    EXPECT_EQ(want[3], 1.0);
    EXPECT_EQ(want[4], 0.0);
    for (int r = 0; r < n; ++r) {
      if (exact())
        EXPECT_EQ(got[r], want[r]) << "row " << r;
      else
        EXPECT_NEAR(got[r], want[r], 1e-12 * want[r]) << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, Sampling, ::testing::ValuesIn(kBackendNames),
                         backend_param_name);

}  // namespace
