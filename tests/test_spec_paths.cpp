// Loop-level proofs of the relaxed paths test_spec_loop.cpp does not cover, on the micro models
// (tests/spec_analysis.h): GSD (paper and code form), amplify, addition, LANTERN's code form, the
// relaxed rules on Jacobi (one-hot) drafts, top-p < 1, a CFG interval, a LANTERN round whose
// accepted neighbours carry target mass, and greedy decoding token for token. Each one-round test
// also shows that its samples reject the analysis of a deliberately wrong rule (a test of the
// test), so it can fail when the rule it guards is wrong.
#include <gtest/gtest.h>

#include "spec_analysis.h"

#include <cstdio>

#include "speculative/method.h"

using namespace tessera;
using namespace tessera::spec_test;

namespace {

using B = paper::LanternConfig::Budget;

class SpecPaths : public MicroModels {
 protected:
  static paper::Rule lantern(int k, B budget, double delta, double lambda, bool code = false) {
    return micro_lantern(k, budget, delta, lambda, code);
  }
  static paper::Rule gsd(int g, double d, double delta, bool code = false, bool mirrored = false) {
    const Table e = micro_token_embeddings();
    paper::GsdConfig c{g, d, delta, code, mirrored};
    return paper::gsd(c, e.data, e.dim);
  }
  // Checks c, then that its samples reject the analysis of each mutant.
  static RoundCheck check_with_mutants(
      const RelaxedCase& c, const std::vector<std::pair<std::string, paper::Rule>>& mutants,
      const NodeVisitor& visit = {}) {
    const RoundCheck ok = check_round(*target_, *draft_, c, kRelaxedSamples, visit);
    for (const auto& [label, rule] : mutants) {
      SCOPED_TRACE(c.label + " vs mutant " + label);
      const RoundCheck bad = recheck(*target_, *draft_, c, rule, ok);
      const double tv = total_variation(bad.analysis.output, ok.analysis.output);
      std::printf("    mutant %-26s TV to the paper's analysis %.4f  p %.3g  impossible %d\n",
                  label.c_str(), tv, bad.chi.p_value, bad.chi.impossible);
      EXPECT_TRUE(rejects(bad.chi)) << "chi2 " << bad.chi.stat << " df " << bad.chi.df;
    }
    return ok;
  }
};

RelaxedCase make_case(std::string label, const std::string& method, bool draft_model,
                      MethodParams params, paper::Rule rule) {
  RelaxedCase c{std::move(label), sampling_options(method, draft_model), std::move(rule)};
  c.o.sampling.top_p = 1.0f;
  c.o.spec.params = std::move(params);
  return c;
}

// GSD Alg. 3 with a draft model, G = 4 over the full vocabulary (top-k off): the ascending window
// holds the 2 less probable tokens and the 1 more probable; δ = 0.3 pops some of them.
TEST_F(SpecPaths, GsdWithDraftModel) {
  RelaxedCase c =
      make_case("gsd G=4", "gsd", true, {{"gsd.g", int64_t{4}}, {"gsd.d", 1e6}, {"gsd.delta", 0.3}},
                gsd(4, 1e6, 0.3));
  c.o.sampling.top_k = 0;
  check_with_mutants(c, {{"mirrored window", gsd(4, 1e6, 0.3, false, true)},
                         {"no grouping (exact)", paper::exact()}});
}

// junhyukso/GSD's form: strict filters and f = 0 for the G//2 least probable tokens.
TEST_F(SpecPaths, GsdReferenceWithDraftModel) {
  RelaxedCase c = make_case(
      "gsd reference G=4", "gsd", true,
      {{"gsd.g", int64_t{4}}, {"gsd.d", 1e6}, {"gsd.delta", 0.3}, {"gsd.reference", true}},
      gsd(4, 1e6, 0.3, true));
  c.o.sampling.top_k = 0;
  check_with_mutants(c, {{"paper form", gsd(4, 1e6, 0.3)}});
}

TEST_F(SpecPaths, AmplifyAndAddition) {
  check_with_mutants(
      make_case("amplify k=2", "amplify", true, {{"amplify.k", 2.0}}, paper::amplify(2.0)),
      {{"k=1.5", paper::amplify(1.5)}});
  check_with_mutants(make_case("addition eps=0.1", "addition", true, {{"addition.eps", 0.1}},
                               paper::addition(0.1f)),
                     {{"eps=0.05", paper::addition(0.05)}, {"amplify k=1.1", paper::amplify(1.1)}});
}

// lantern.reference: k others in B_k, `<=`, and the code's residuals: static tree (draft model,
// q' = q with the k+1 nearest zeroed) and dynamic tree (Jacobi one-hot drafts, p with x and the
// k+1 nearest zeroed).
TEST_F(SpecPaths, LanternReferenceCode) {
  const MethodParams params = {
      {"lantern.k", int64_t{1}}, {"lantern.delta", 0.4}, {"lantern.reference", true}};
  for (bool draft_model : {true, false}) {
    RelaxedCase c = make_case(draft_model ? "lantern-ref draft model" : "lantern-ref Jacobi",
                              "lantern", draft_model, params, lantern(1, B::Delta, 0.4, 0, true));
    c.o.sampling.top_k = 0;
    paper::Rule paper_residual = c.rule;
    paper_residual.g = lantern(2, B::Delta, 0.4, 0).g;  // the same A, the paper's p_{k,δ} residual
    check_with_mutants(c, {{"paper's residual", paper_residual},
                           {"paper form (k-1 others, <)", lantern(1, B::Delta, 0.4, 0)}});
  }
}

// Relaxed rules on Jacobi drafts (draft_model empty, as sjd): fresh drafts are uniform over the
// vocabulary with one-hot q, so f = min(1, ω p(x)) or LANTERN's p(x) + S.
TEST_F(SpecPaths, RelaxedRulesOnJacobiDrafts) {
  const float d = 2.0f, nu = 0.7f;
  check_with_mutants(
      make_case("cool-sd Jacobi", "cool-sd", false, {{"cool.delta", 2.0}, {"cool.nu", 0.7}},
                paper::optimal(paper::cool_sd(d, nu))),
      {{"exact", paper::exact()}});
  // (UniformRSD with δ < 1 and G* is lossless on one-hot drafts, so δ > 1 here.)
  check_with_mutants(make_case("uniform-rsd 3 Jacobi", "uniform-rsd", false, {{"rsd.delta", 3.0}},
                               paper::optimal(paper::uniform_rsd(3.0f))),
                     {{"delta=2", paper::uniform_rsd(2.0f)}});
  RelaxedCase lt =
      make_case("lantern Jacobi", "lantern", false,
                {{"lantern.k", int64_t{3}}, {"lantern.delta", 0.4}}, lantern(3, B::Delta, 0.4f, 0));
  lt.o.sampling.top_k = 0;
  check_with_mutants(lt, {{"code form", lantern(3, B::Delta, 0.4f, 0, true)}});
  RelaxedCase lpp = make_case("lantern++ Jacobi", "lantern++", false,
                              {{"lantern.k", int64_t{3}}, {"lantern.lambda", 1.5}},
                              lantern(3, B::LambdaPaper, 0, 1.5f));
  lpp.o.sampling.top_k = 0;
  check_with_mutants(lpp, {{"lambda-1 budget", lantern(3, B::LambdaCode, 0, 1.5f)}});
  RelaxedCase g =
      make_case("gsd Jacobi", "gsd", false,
                {{"gsd.g", int64_t{4}}, {"gsd.d", 1e6}, {"gsd.delta", 0.3}}, gsd(4, 1e6, 0.3));
  g.o.sampling.top_k = 0;
  check_with_mutants(g, {{"mirrored window", gsd(4, 1e6, 0.3, false, true)}});
}

// Top-p < 1 and a CFG interval (guidance only for tokens 0 and 1): the analysis sees the same
// filtered, partly unguided conditionals as the loop.
TEST_F(SpecPaths, TopPAndCfgInterval) {
  RelaxedCase tp =
      make_case("cool-sd top-p 0.8", "cool-sd", true, {{"cool.delta", 2.0}, {"cool.nu", 0.7}},
                paper::optimal(paper::cool_sd(2.0f, 0.7f)));
  tp.o.sampling.top_k = 0;
  tp.o.sampling.top_p = 0.8f;
  check_with_mutants(tp, {{"exact", paper::exact()}});
  RelaxedCase ci =
      make_case("lantern cfg interval 0", "lantern", true,
                {{"lantern.k", int64_t{3}}, {"lantern.delta", 0.4}}, lantern(3, B::Delta, 0.4f, 0));
  ci.o.sampling.top_k = 0;
  ci.o.sampling.cfg_scale = 4.0f;
  ci.o.sampling.cfg_interval = 0.0f;
  const RoundCheck ok = check_with_mutants(ci, {{"exact", paper::exact()}});
  // The interval matters: the analysis with guidance everywhere is another distribution.
  RelaxedCase always = ci;
  always.o.sampling.cfg_interval = -1.0f;
  const RoundCheck guided = recheck(*target_, *draft_, always, ci.rule, ok);
  EXPECT_TRUE(rejects(guided.chi)) << "chi2 " << guided.chi.stat;
}

// LANTERN where A holds tokens the target can produce (top-k off, δ = 0.4): the test checks the
// relaxation itself, not only mass moved from target-impossible tokens. k = 2 (B_k = x and its
// nearest neighbour, LANTERN Alg. 2 line 4) and k = 3.
TEST_F(SpecPaths, LanternNeighboursCarryTargetMass) {
  const Table cb = micro_codebook();
  for (int k : {2, 3}) {
    RelaxedCase c = make_case("lantern k=" + std::to_string(k) + " positive A", "lantern", true,
                              {{"lantern.k", int64_t{k}}, {"lantern.delta", 0.4}},
                              lantern(k, B::Delta, 0.4f, 0));
    c.o.sampling.top_k = 0;
    paper::LanternConfig cfg;
    cfg.k = k;
    cfg.delta = 0.4f;
    double positive = 0.0;  // expected drafted nodes per round whose A holds target mass
    paper::Rule wrong_residual = c.rule;
    wrong_residual.g = [](const paper::Node& n) { return paper::positive_part(n.p, n.q); };
    // k = 2 guards B_k's size (with k others the second neighbour often fits in δ); k = 3
    // guards the residual (with k = 2 a residual from p is only 0.007 away in TV).
    std::vector<std::pair<std::string, paper::Rule>> mutants = {
        {"k-2 others in B_k", lantern(k - 1, B::Delta, 0.4f, 0)}};
    if (k == 2)
      mutants.push_back({"k others in B_k", lantern(k + 1, B::Delta, 0.4f, 0)});
    else
      mutants.push_back({"residual from p", wrong_residual});
    check_with_mutants(c, mutants, [&](const paper::Node& n, double w) {
      const auto a = paper::lantern_set(cfg, cb.data, cb.dim, n.p, n.x);
      if (a.mass > 0.0) positive += w;
    });
    std::printf("    drafted nodes per round whose A holds target mass: %.3f\n", positive);
    EXPECT_GT(positive, 0.2);
  }
}

// ---- greedy decoding: the loop against a greedy walk over the papers' rules --------------------

// Greedy SD (temperature 0): each round drafts the draft model's argmax chain, keeps drafts while
// the rule's greedy test passes, then appends the target's argmax (bonus or correction). With
// `tree` (kary branching), a node's children are the draft's top-B_d tokens (Qrank: the draft's
// filtered distribution, most probable first, ties to the smaller id; tokens without mass are not
// drafted), tested in that order; the first that passes continues the walk.
Seq greedy_walk(Conditionals& P, Conditionals& Pverify, Conditionals& Q, const paper::Rule& rule,
                int draft_len, int n_tokens, const std::vector<int>& tree = {},
                Conditionals* Qrank = nullptr, int64_t* rounds = nullptr) {
  Seq s{static_cast<int32_t>(paper::first_argmax(P.dist({})))};
  if (rounds) *rounds = 0;
  while (static_cast<int>(s.size()) < n_tokens) {
    if (rounds) ++*rounds;
    const int depth = std::min(draft_len, n_tokens - static_cast<int>(s.size()) - 1);
    for (int d = 0; d < depth; ++d) {
      paper::Node n;
      n.p = Pverify.dist(s);
      n.q = Q.dist(s);
      n.i = d + 1;
      n.L = depth;
      std::vector<int> children = {paper::first_argmax(n.q)};
      if (!tree.empty()) {
        const paper::Dist r = (Qrank ? *Qrank : Q).dist(s);
        children.clear();
        for (int c = 0; c < tree[d]; ++c) {
          int best = -1;
          for (int y = 0; y < static_cast<int>(r.size()); ++y)
            if (r[y] > 0.0 && std::find(children.begin(), children.end(), y) == children.end() &&
                (best < 0 || r[y] > r[best]))
              best = y;
          if (best >= 0) children.push_back(best);
        }
      }
      bool kept = false;
      for (int x : children) {
        n.x = x;
        if (rule.greedy(n)) {
          kept = true;
          break;
        }
      }
      if (!kept) break;
      s.push_back(n.x);
    }
    s.push_back(static_cast<int32_t>(paper::first_argmax(P.dist(s))));
  }
  return s;
}

TEST_F(SpecPaths, GreedyDecodingFollowsThePapers) {
  struct Greedy {
    std::string method;
    MethodParams params;
    paper::Rule rule;
    bool unfiltered = false;  // lantern.reference verifies against the unfiltered softmax
  };
  const std::vector<Greedy> cases = {
      {"sd", {}, paper::exact()},
      {"lantern",
       {{"lantern.k", int64_t{3}}, {"lantern.delta", 0.9}},
       lantern(3, B::Delta, 0.9f, 0)},
      {"lantern++",
       {{"lantern.k", int64_t{3}}, {"lantern.lambda", 3.0}},
       lantern(3, B::LambdaPaper, 0, 3.0f)},
      {"lantern",
       {{"lantern.k", int64_t{2}}, {"lantern.delta", 0.9}, {"lantern.reference", true}},
       lantern(2, B::Delta, 0.9f, 0, true),
       true},
  };
  int compared = 0, later_siblings = 0;  // tree runs where a later sibling saved a round
  for (const auto& g : cases)
    for (const std::vector<int>& tree : {std::vector<int>{}, std::vector<int>{3, 2}}) {
      int relaxed_differs = 0;
      for (int top_k : {0, 3})
        for (float cfg : {1.0f, 2.0f, 4.0f})
          for (int cls = 0; cls < 3; ++cls) {
            GenerateOptions o = sampling_options(g.method);
            o.sampling.temperature = 0.0f;
            o.sampling.top_k = top_k;
            o.sampling.top_p = 1.0f;
            o.sampling.cfg_scale = cfg;
            o.spec.draft_len = 2;
            o.spec.params = g.params;
            if (!tree.empty()) o.spec.tree = "kary:3,2";
            o.batch = 1;
            SamplingOptions verify = o.sampling;
            verify.temperature = 1.0f;  // greedy verification sees the untempered softmax
            if (g.unfiltered) verify.top_k = 0;
            Conditionals Pv(*target_, cls, verify), Q(*draft_, cls, verify);
            SamplingOptions filtered = verify;
            filtered.top_k = top_k;
            Conditionals Pf(*target_, cls, filtered), Qf(*draft_, cls, filtered);
            int64_t want_rounds = 0, chain_rounds = 0;
            const Seq want = greedy_walk(Pf, Pv, Q, g.rule, 2, n_tokens(), tree, &Qf, &want_rounds);
            GenerateStats st;
            const Seq got = target_->generate({Condition::label(cls)}, o, &st).at(0);
            // The rounds tell accepted drafts apart where the tokens cannot: a later sibling
            // rejected instead of accepted leaves its own token as the target's correction.
            EXPECT_EQ(st.rounds(), want_rounds);
            if (!tree.empty()) {
              greedy_walk(Pf, Pv, Q, g.rule, 2, n_tokens(), {1, 1}, &Qf, &chain_rounds);
              later_siblings += want_rounds < chain_rounds;
            }
            SCOPED_TRACE(g.method + (tree.empty() ? "" : " tree kary:3,2") + " top-k " +
                         std::to_string(top_k) + " cfg " + std::to_string(cfg) + " class " +
                         std::to_string(cls));
            EXPECT_EQ(got, want);
            const Seq vanilla = greedy_walk(Pf, Pf, Q, paper::exact(), 2, n_tokens());
            relaxed_differs += got != vanilla;
            ++compared;
          }
      // The relaxed greedy walks do differ from exact greedy decoding (and sd does not).
      if (g.method == "sd")
        EXPECT_EQ(relaxed_differs, 0);
      else
        EXPECT_GT(relaxed_differs, 0) << g.method;
    }
  EXPECT_EQ(compared, 144);
  EXPECT_GT(later_siblings, 0);
  std::printf("  greedy kary:3,2: a later sibling saved a round in %d of 72 runs\n",
              later_siblings);
}

}  // namespace
