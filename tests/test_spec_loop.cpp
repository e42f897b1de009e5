// Proofs of the speculative loop on models whose distributions can be enumerated
// (tests/fixtures/spec: a 4-token vocabulary, 2x2 grid, random weights).
//
// - Lossless methods (sd with a draft model, sjd) must sample the target's joint distribution over
//   all 4^4 sequences exactly: Pearson chi-square goodness of fit, cells with expected count < 5
//   pooled, significance 1e-3, fixed seeds (so each test is deterministic). A deliberately broken
//   residual must fail the same test (a test of the test).
// - Relaxed methods are analysed for one round (SpeculativeOptions::max_rounds = 1, the rest
//   sampled by the target, as the "virtual extension" of COOL-SD (Li et al., 2026) §3.2): the
//   loop's samples must follow the exactly computed output distribution of the rule (chi-square as
//   above), and that distribution's total variation from the target must stay within the bound
//   of COOL-SD's Theorem 2, Eq. 4, computed exactly.
#include <gtest/gtest.h>

#include "stat_tests.h"

#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "decode/guidance.h"
#include "models/llamagen.h"
#include "sampling/sampler.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/method.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

const std::string kSpec = std::string(TESSERA_FIXTURES) + "/spec/";
const std::string kTiny = std::string(TESSERA_FIXTURES) + "/llamagen/c2i_f32";

using Seq = std::vector<int32_t>;
using test_stats::gamma_q;

struct ChiSquare {
  double stat = 0.0, p_value = 1.0;
  int df = 0;
  int impossible = 0;  // samples of sequences with probability 0
};

// Pearson's test of `samples` against the distribution `expected` (sequence -> probability).
ChiSquare chi_square(const std::map<Seq, double>& expected, const std::vector<Seq>& samples) {
  std::map<Seq, int64_t> counts;
  for (const auto& s : samples) counts[s]++;
  ChiSquare r;
  const double n = static_cast<double>(samples.size());
  double pooled_e = 0.0, pooled_o = 0.0;
  int cells = 0;
  for (const auto& [seq, p] : expected) {
    const double e = p * n;
    const double o = counts.count(seq) ? static_cast<double>(counts[seq]) : 0.0;
    if (p <= 0.0) {
      r.impossible += static_cast<int>(o);
      continue;
    }
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    r.stat += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_e > 0.0) {
    r.stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  }
  for (const auto& [seq, c] : counts)
    if (!expected.count(seq)) r.impossible += static_cast<int>(c);
  r.df = cells - 1;
  r.p_value = gamma_q(r.df / 2.0, r.stat / 2.0);
  return r;
}

double total_variation(const std::map<Seq, double>& a, const std::map<Seq, double>& b) {
  double tv = 0.0;
  std::map<Seq, double> all = a;
  for (const auto& [s, p] : b) all.emplace(s, 0.0);
  for (const auto& [s, unused] : all) {
    const double pa = a.count(s) ? a.at(s) : 0.0, pb = b.count(s) ? b.at(s) : 0.0;
    tv += std::fabs(pa - pb);
  }
  return tv / 2.0;
}

std::map<Seq, double> empirical(const std::vector<Seq>& samples) {
  std::map<Seq, double> m;
  for (const auto& s : samples) m[s] += 1.0 / samples.size();
  return m;
}

// The next-token distribution of a model (with CFG, temperature, top-k, top-p) after a prefix,
// memoised: the "P(.|x_{<i})" and "Q(.|x_{<i})" of the analysis.
class Conditionals {
 public:
  Conditionals(Pipeline& pipe, int cls, const SamplingOptions& s)
      : pipe_(pipe), cls_(cls), params_(to_sampling_params(s)) {}
  const std::vector<float>& operator()(const Seq& prefix) {
    auto it = memo_.find(prefix);
    if (it != memo_.end()) return it->second;
    const int V = pipe_.config().gpt.vocab_size;
    const size_t last = prefix.size() * V;
    const auto cond = pipe_.forward_logits(Condition::label(cls_), prefix);
    std::vector<float> probs(V);
    std::span<const float> c(cond.data() + last, V), u;
    std::vector<float> uncond;
    if (params_.guided(static_cast<int>(prefix.size()))) {
      uncond = pipe_.forward_logits(Condition::unconditional(), prefix);
      u = {uncond.data() + last, static_cast<size_t>(V)};
    }
    target_distribution(c, u, params_.cfg_scale, params_, probs);
    return memo_[prefix] = probs;
  }

 private:
  Pipeline& pipe_;
  int cls_;
  SamplingParams params_;
  std::map<Seq, std::vector<float>> memo_;
};

// The joint distribution of all sequences of length n under `cond`, extending `prefix` (with
// probability `w`) token by token.
void enumerate_joint(Conditionals& cond, const Seq& prefix, double w, int n,
                     std::map<Seq, double>& out) {
  if (static_cast<int>(prefix.size()) == n) {
    if (w > 0.0) out[prefix] += w;
    return;
  }
  const auto p = cond(prefix);
  for (size_t y = 0; y < p.size(); ++y) {
    if (p[y] <= 0.0f) continue;
    Seq next = prefix;
    next.push_back(static_cast<int32_t>(y));
    enumerate_joint(cond, next, w * p[y], n, out);
  }
}

std::vector<Seq> generate(Pipeline& pipe, int cls, const GenerateOptions& o, int n) {
  std::vector<Condition> conds(n, Condition::label(cls));
  return pipe.generate(conds, o);
}

GenerateOptions sampling_options(const std::string& method) {
  GenerateOptions o;
  o.sampling.cfg_scale = 2.0f;
  o.sampling.top_k = 3;
  o.sampling.top_p = 0.9f;
  o.sampling.temperature = 1.0f;
  o.seed = 20261123;
  o.batch = 500;
  o.spec.method = method;
  if (method != "vanilla" && method != "sjd") o.spec.draft_model = kSpec + "micro_draft";
  return o;
}

constexpr int kSamples = 12000;
constexpr double kAlpha = 1e-3;  // significance of every goodness-of-fit test in this file

class SpecMicro : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions lo;
    lo.load_decoder = false;
    lo.threads = 1;
    target_ = Pipeline::load(kSpec + "micro_target", lo).release();
    draft_ = Pipeline::load(kSpec + "micro_draft", lo).release();
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
  }
  static std::map<Seq, double> target_joint(int cls, const SamplingOptions& s) {
    Conditionals p(*target_, cls, s);
    std::map<Seq, double> joint;
    enumerate_joint(p, {}, 1.0, target_->config().gpt.n_image_tokens(), joint);
    return joint;
  }
  static Pipeline* target_;
  static Pipeline* draft_;
};
Pipeline* SpecMicro::target_ = nullptr;
Pipeline* SpecMicro::draft_ = nullptr;

TEST_F(SpecMicro, ExactJointSumsToOne) {
  const auto joint = target_joint(1, sampling_options("vanilla").sampling);
  double total = 0.0;
  for (const auto& [s, p] : joint) total += p;
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_GT(joint.size(), 20u);  // top-k 3 / top-p 0.9 leave many sequences possible
}

// Vanilla sampling is the reference the others are held to; it must pass the test itself.
TEST_F(SpecMicro, LosslessMethodsSampleTheTargetJointDistribution) {
  for (const std::string method : {"vanilla", "sd", "sjd"}) {
    for (int cls : {0, 2}) {
      GenerateOptions o = sampling_options(method);
      o.spec.draft_len = method == "sjd" ? 3 : 2;
      const auto joint = target_joint(cls, o.sampling);
      const auto samples = generate(*target_, cls, o, kSamples);
      const ChiSquare r = chi_square(joint, samples);
      SCOPED_TRACE(method + " class " + std::to_string(cls));
      EXPECT_EQ(r.impossible, 0);
      EXPECT_GT(r.df, 10);
      EXPECT_GT(r.p_value, kAlpha) << "chi2 " << r.stat << " df " << r.df;
    }
  }
}

// Longer drafts than the grid and no top-k/top-p: every draft depth is exercised.
TEST_F(SpecMicro, SpeculativeDecodingIsExactWithoutFilters) {
  GenerateOptions o = sampling_options("sd");
  o.sampling.top_k = 0;
  o.sampling.top_p = 1.0f;
  o.sampling.cfg_scale = 3.0f;
  o.spec.draft_len = 3;  // the most a 4-token image allows: the first round drafts to its end
  const auto joint = target_joint(1, o.sampling);
  const ChiSquare r = chi_square(joint, generate(*target_, 1, o, kSamples));
  EXPECT_EQ(r.impossible, 0);
  EXPECT_GT(r.p_value, kAlpha) << "chi2 " << r.stat << " df " << r.df;
}

// The exact rule with a wrong residual (resample from p itself, ignoring q): the first-rejection
// token then over-represents what the draft already proposes, and the test must notice.
class BrokenResidualRule : public speculative::AcceptanceRule {
 public:
  std::string name() const override { return "broken"; }
  double accept_probability(const speculative::NodeView& n) const override {
    return exact_->accept_probability(n);
  }
  void residual(const speculative::NodeView& n, std::span<float> out) const override {
    std::copy(n.p.begin(), n.p.end(), out.begin());
  }

 private:
  std::unique_ptr<speculative::AcceptanceRule> exact_ = speculative::make_exact_rule();
};

TEST_F(SpecMicro, BrokenResidualFailsTheTest) {
  GenerateOptions o = sampling_options("sd");
  const SamplingParams params = to_sampling_params(o.sampling);
  const ModelConfig tc = load_model_config(kSpec + "micro_target");
  const ModelConfig dc = load_model_config(kSpec + "micro_draft");
  set_cpu_threads(1);
  LlamaGen target(tc, cpu_backend()), draft(dc, cpu_backend());
  BrokenResidualRule broken;
  auto exact = speculative::make_exact_rule();
  const auto joint = target_joint(1, o.sampling);
  std::vector<Seq> fine, bad;
  for (int b = 0; b < kSamples / 500; ++b) {
    const Condition c = Condition::label(1);
    std::vector<const Condition*> conds(500, &c);
    std::vector<uint64_t> idx(500);
    std::iota(idx.begin(), idx.end(), static_cast<uint64_t>(b) * 500);
    for (auto* rule : {static_cast<const speculative::AcceptanceRule*>(exact.get()),
                       static_cast<const speculative::AcceptanceRule*>(&broken)}) {
      speculative::ModelDrafter drafter(draft, params, 2, 500);
      speculative::LoopSettings ls;
      ls.rule = rule;
      ls.drafter = &drafter;
      ls.draft_len = 2;
      GenerateStats st;
      auto grids =
          speculative::generate_speculative(target, conds, idx, params, o.seed, ls, {}, st);
      auto& dst = rule == &broken ? bad : fine;
      dst.insert(dst.end(), grids.begin(), grids.end());
    }
  }
  const ChiSquare ok = chi_square(joint, fine), ko = chi_square(joint, bad);
  EXPECT_GT(ok.p_value, kAlpha) << "chi2 " << ok.stat << " df " << ok.df;
  EXPECT_LT(ko.p_value, 1e-6) << "chi2 " << ko.stat << " df " << ko.df;
}

// ---- one round of a relaxed rule, analysed exactly ------------------------------------------

struct RoundAnalysis {
  std::map<Seq, double> output;  // joint over the whole grid: x0 exact, one round, then target
  double tv = 0.0;               // TV(output, target joint), exact
  double bound = 0.0;            // COOL-SD Eq. 4, averaged over x0 ~ P
};

// Output distribution of one round of relaxed SD (COOL-SD Alg. 1) after x0, and Eq. 4's bound.
RoundAnalysis analyse_round(Conditionals& P, Conditionals& Q,
                            const speculative::AcceptanceRule& rule, int L, int n_tokens,
                            const std::map<Seq, double>& target) {
  RoundAnalysis a;
  const auto& p0 = P({});
  const int V = static_cast<int>(p0.size());
  auto view = [&](const Seq& prefix, int token, int depth) {
    speculative::NodeView v;
    v.token = token;
    v.position = depth;
    v.draft_len = L;
    v.p = P(prefix);
    v.q = Q(prefix);
    return v;
  };
  auto resample = [&](const Seq& prefix, int depth, int token_hint) {
    std::vector<float> g(V, 0.0f);
    rule.residual(view(prefix, token_hint, depth), g);
    double mass = std::accumulate(g.begin(), g.end(), 0.0);
    if (!(mass > 0.0)) {  // the loop falls back to p
      g = P(prefix);
      mass = 1.0;
    }
    for (auto& v : g) v = static_cast<float>(v / mass);
    return g;
  };
  for (int x0 = 0; x0 < V; ++x0) {
    if (p0[x0] <= 0.0f) continue;
    // Recursion over accepted drafts x_{1:i} with weight Q(x_{1:i}) prod f.
    std::function<void(const Seq&, double, int)> walk = [&](const Seq& prefix, double w,
                                                            int depth) {
      if (w <= 0.0) return;
      if (depth > L) {  // every draft accepted: the bonus and the rest from the target
        enumerate_joint(P, prefix, w, n_tokens, a.output);
        return;
      }
      const auto q = Q(prefix);
      const auto p = P(prefix);
      // Rejected mass redistributed by G. LANTERN's G depends on the rejected token, so the sum
      // over rejected tokens is kept inside: sum_x~ (1 - f(x~)) Q(x~) G_x~(.). For rules whose G
      // does not depend on x~ this is exactly Eq. 4's G * sum_x~ (1 - f(x~)) Q(x~).
      std::vector<double> redistributed(V, 0.0), accepted(V, 0.0);
      for (int y = 0; y < V; ++y) {
        if (q[y] <= 0.0f) continue;
        const double f = rule.accept_probability(view(prefix, y, depth));
        accepted[y] = q[y] * f;
        Seq next = prefix;
        next.push_back(y);
        walk(next, w * q[y] * f, depth + 1);
        if (f >= 1.0) continue;
        const auto g = resample(prefix, depth, y);
        for (int z = 0; z < V; ++z) redistributed[z] += (1.0 - f) * q[y] * g[z];
      }
      double term = 0.0;
      for (int y = 0; y < V; ++y) term += std::fabs(accepted[y] - p[y] + redistributed[y]);
      a.bound += 0.5 * w * term;  // w = P(x0) Q(x_{1:i}) prod f: Eq. 4's weight, averaged over x0
      for (int y = 0; y < V; ++y) {
        if (redistributed[y] <= 0.0) continue;
        Seq next = prefix;
        next.push_back(y);
        enumerate_joint(P, next, w * redistributed[y], n_tokens, a.output);
      }
    };
    walk({x0}, p0[x0], 1);
  }
  a.tv = total_variation(a.output, target);
  return a;
}

struct RelaxedCase {
  std::string method;
  std::function<void(SpeculativeOptions&)> set;
};

TEST_F(SpecMicro, RelaxedRoundsFollowTheirAnalysisAndStayWithinEq4) {
  const std::vector<RelaxedCase> cases = {
      {"cool-sd",
       [](SpeculativeOptions& s) {
         s.params = {{"cool.delta", 2.0}};
       }},
      {"uniform-rsd",
       [](SpeculativeOptions& s) {
         s.params = {{"rsd.delta", 1.5}};
       }},
      {"lantern",
       [](SpeculativeOptions& s) {
         s.params = {{"lantern.k", int64_t{2}}, {"lantern.delta", 0.3}};
       }},
      {"lantern++",
       [](SpeculativeOptions& s) {
         s.params = {{"lantern.k", int64_t{2}}, {"lantern.lambda", 2.0}};
       }},
      {"cool-sd",
       [](SpeculativeOptions& s) {
         s.params = {{"cool.delta", 2.0}};
         s.resample = "vanilla";
       }},
  };
  const int L = 2, cls = 1;
  for (const auto& c : cases) {
    GenerateOptions o = sampling_options(c.method);
    o.sampling.top_p = 1.0f;
    o.spec.draft_len = L;
    o.spec.max_rounds = 1;
    c.set(o.spec);
    SCOPED_TRACE(c.method + " resample=" + o.spec.resample);
    speculative::Method m =
        speculative::make_method(o.spec, kSpec + "micro_target", target_->config().gpt);
    Conditionals P(*target_, cls, o.sampling), Q(*draft_, cls, o.sampling);
    const auto target = target_joint(cls, o.sampling);
    const int N = target_->config().gpt.n_image_tokens();
    const RoundAnalysis a = analyse_round(P, Q, *m.rule, L, N, target);
    double total = 0.0;
    for (const auto& [s, p] : a.output) total += p;
    ASSERT_NEAR(total, 1.0, 1e-5);
    EXPECT_GT(a.tv, 1e-3);            // the relaxation does change the distribution ...
    EXPECT_LE(a.tv, a.bound + 1e-9);  // ... within Theorem 2's bound (Eq. 4)
    const auto samples = generate(*target_, cls, o, kSamples);
    const ChiSquare r = chi_square(a.output, samples);
    EXPECT_EQ(r.impossible, 0);
    EXPECT_GT(r.p_value, kAlpha) << "chi2 " << r.stat << " df " << r.df;
    // The measured distance: the empirical TV is biased upwards by sampling noise (about
    // sqrt(cells / n)), so it is held to the bound plus that allowance.
    const double measured = total_variation(empirical(samples), target);
    EXPECT_LE(measured, a.bound + 0.06) << "exact " << a.tv;
  }
}

// ---- greedy decoding and reproducibility on the tiny 256-token model --------------------------

std::vector<Seq> run_tiny(const std::string& method, int n, int batch, float temperature,
                          int draft_len = 0) {
  LoadOptions lo;
  lo.load_decoder = false;
  auto pipe = Pipeline::load(kTiny, lo);
  GenerateOptions o;
  o.sampling.temperature = temperature;
  o.sampling.cfg_scale = 4.0f;
  o.seed = 7;
  o.batch = batch;
  o.spec.method = method;
  o.spec.draft_len = draft_len;
  if (method == "sd") o.spec.draft_model = kSpec + "tiny_draft";
  std::vector<Condition> conds;
  for (int i = 0; i < n; ++i) conds.push_back(Condition::label(i % 10));
  return pipe->generate(conds, o);
}

TEST(SpecGreedy, SdAndSjdEqualVanillaTokenForToken) {
  const auto ref = run_tiny("vanilla", 3, 3, 0.0f);
  EXPECT_EQ(run_tiny("sd", 3, 2, 0.0f), ref);
  EXPECT_EQ(run_tiny("sd", 3, 1, 0.0f, 7), ref);
  EXPECT_EQ(run_tiny("sjd", 3, 3, 0.0f), ref);
  EXPECT_EQ(run_tiny("sjd", 3, 1, 0.0f, 4), ref);
}

TEST(SpecReproducibility, ResultsDoNotDependOnTheBatch) {
  for (const std::string method : {"sd", "sjd"}) {
    SCOPED_TRACE(method);
    const auto one = run_tiny(method, 4, 1, 1.0f);
    EXPECT_EQ(run_tiny(method, 4, 4, 1.0f), one);
    EXPECT_EQ(run_tiny(method, 4, 3, 1.0f), one);
  }
}

}  // namespace

namespace {

// The target as its own draft model: q = p at every node, so every draft must be accepted
// (f = min(1, p/q) = 1) and a round commits L + 1 tokens, for c2i and for t2i (caption prefix
// with padding, CFG on both models).
TEST(SpecSelfDraft, EveryDraftIsAccepted) {
  const std::string dir = std::string(TESSERA_FIXTURES) + "/llamagen/";
  for (const std::string model : {"c2i_f32", "t2i_f32"}) {
    SCOPED_TRACE(model);
    LoadOptions lo;
    lo.load_decoder = false;
    auto pipe = Pipeline::load(dir + model, lo);
    const Condition cond = model == "c2i_f32" ? Condition::label(4)
                                              : Condition::caption_file(dir + "golden/caption.npy",
                                                                        pipe->config().gpt);
    GenerateOptions o;
    o.spec.method = "sd";
    o.spec.draft_model = dir + model;
    o.spec.draft_len = 4;
    o.batch = 2;
    GenerateStats st;
    const auto grids = pipe->generate({cond, cond, cond}, o, &st);
    ASSERT_EQ(grids.size(), 3u);
    for (const auto& im : st.per_image) {
      EXPECT_EQ(im.tokens, 16);
      EXPECT_EQ(im.rounds, 3);  // 1 + 5 + 5 + 5 tokens
      ASSERT_EQ(im.proposed.size(), 4u);
      EXPECT_EQ(im.accepted, im.proposed);
    }
    EXPECT_DOUBLE_EQ(st.mean_accepted_length(), 5.0);
  }
}

}  // namespace
