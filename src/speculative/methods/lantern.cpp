// lantern and lantern++: relaxed acceptance over latent-space neighbours (LANTERN, Jang et al.,
// 2025; LANTERN++ as restated in COOL-SD (Li et al., 2026) §3.1). The rule is
// rules/lantern_rule.cpp.
#include <algorithm>
#include <cmath>

#include "speculative/method_params.h"
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"

namespace tessera::speculative {

namespace {

struct LanternOptions {
  int k = 1000;  // LANTERN: scaled to the vocabulary when not given (default_k)
  float delta = 0.1f;
  float lambda = 2.0f;
  std::string lambda_rule = "paper";  // "code" when --lantern-reference is given without it
  std::string metric = "l2";
  bool reference = false;
};

LanternOptions defaults(bool plus) {
  LanternOptions o;
  if (plus) o.k = 10;
  return o;
}

// LANTERN's k = 1000 was chosen for LlamaGen's 16384-code VQ (LANTERN §5, Table 2): 6.1% of the
// codebook. The default keeps that fraction, so a 1024-code model considers 62 neighbours rather
// than nearly its whole codebook (docs/methods.md, "Defaults per model"). LANTERN++'s k = 10 is an
// absolute neighbourhood and stays 10.
int default_k(bool plus, int vocab) {
  if (plus) return std::min(10, vocab - 1);
  const long scaled = std::lround(1000.0 * vocab / 16384.0);
  return static_cast<int>(std::clamp<long>(scaled, 1, vocab - 1));
}

std::vector<ParamSpec<LanternOptions>> specs(bool plus) {
  using O = LanternOptions;
  std::vector<ParamSpec<O>> s;
  ParamSpec<O> k("lantern.k", &O::k, "Latent neighbours considered per drafted token");
  k.in(Range::at_least(1)).noting("< vocabulary size");
  k.tune(plus ? std::vector<double>{5, 10, 20} : std::vector<double>{10, 30, 100});
  if (!plus) k.default_shown_as("1000 x vocabulary / 16384 (62 for 1024 codes)");
  s.push_back(k);
  if (plus) {
    s.push_back(ParamSpec<O>("lantern.lambda", &O::lambda,
                             "LANTERN++ λ: accept neighbours while their mass S < λ p(x~) (paper "
                             "rule) or S <= (λ - 1) p(x~) (code rule)")
                    .in(Range::above(0))
                    .tune({1.5, 2, 3}));
    s.push_back(ParamSpec<O>("lantern.lambda_rule", &O::lambda_rule,
                             "λ convention: paper (COOL-SD §3.1) or code (jadohu/LANTERN)")
                    .one_of({"paper", "code"})
                    .default_shown_as("paper (code with --lantern-reference)"));
  } else
    s.push_back(ParamSpec<O>("lantern.delta", &O::delta,
                             "Total-variation budget δ moved onto the drafted token")
                    .in(Range::open_closed(0, 1))
                    .tune({0.05, 0.1, 0.2}));
  s.push_back(ParamSpec<O>("lantern.metric", &O::metric, "Latent distance of the neighbour table")
                  .one_of({"l2", "cosine"}));
  s.push_back(ParamSpec<O>("lantern.reference", &O::reference,
                           "The published code's B_k (k others), <= test, λ rule, residual and "
                           "unfiltered greedy verification "
                           "(docs/methods.md)"));
  return s;
}

std::unique_ptr<AcceptanceRule> make_rule(bool plus, const MethodParams& given,
                                          const TargetModel& target) {
  const LanternOptions o = read_params(specs(plus), given, defaults(plus));
  const int V = target.config.vocab_size;
  LanternParams lp;
  lp.k = given.count("lantern.k") ? o.k : default_k(plus, V);
  check_param(lp.k <= V - 1, "lantern.k",
              std::to_string(lp.k) + " exceeds the " + std::to_string(V - 1) +
                  " other codes of the vocabulary");
  lp.reference = o.reference;
  if (plus) {
    lp.lambda = o.lambda;
    const bool code = given.count("lantern.lambda_rule") ? o.lambda_rule == "code" : o.reference;
    lp.lambda_rule = code ? LambdaRule::Code : LambdaRule::Paper;
    check_param(
        !code || o.lambda >= 1.0f, "lantern.lambda",
        "must be >= 1 with the code's rule S <= (λ - 1) p(x~), got " + format_default(o.lambda));
  } else
    lp.delta = o.delta;
  auto nb = std::make_shared<const LatentNeighbours>(LatentNeighbours::for_model(
      target.dir, lp.k + 1, o.metric == "l2" ? LatentMetric::L2 : LatentMetric::Cosine));
  check(nb->vocab() == V, target.dir + "/vq.safetensors: codebook has " +
                              std::to_string(nb->vocab()) + " codes, the GPT's vocabulary " +
                              std::to_string(V));
  return make_lantern_rule(lp, nb);
}

MethodEntry entry(bool plus) {
  MethodEntry e;
  e.info = {plus ? "lantern++" : "lantern",
            plus ? "LANTERN++: LANTERN's neighbour acceptance with the λ-rule (COOL-SD §3.1)"
                 : "LANTERN: relaxed acceptance over latent neighbours within a TV budget δ "
                   "(LANTERN §4)",
            TokenKind::Discrete, DraftSource::ModelOrJacobi, describe(specs(plus), defaults(plus))};
  e.make_rule = [plus](const MethodParams& p, const TargetModel& t) {
    return make_rule(plus, p, t);
  };
  return e;
}

}  // namespace

std::vector<MethodEntry> lantern_methods() {
  return {entry(false), entry(true)};
}

}  // namespace tessera::speculative
