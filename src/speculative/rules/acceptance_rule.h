// A speculative-decoding method's verification half: an acceptance rule f(x~; p, q, i) and the
// resampling distribution G used at the first rejection. Rules know nothing of models or of the
// loop (src/speculative/speculative_decoder.cpp); they see one draft node at a time.
//
// Notation (COOL-SD (Li et al., 2026) §3.1): P = target, Q = drafter. LANTERN (Jang et al., 2025)
// swaps the letters; every comment in src/spec uses p = target, q = drafter.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "speculative/rules/walk_rule.h"

namespace tessera::speculative {

// One draft node as a rule sees it.
struct NodeView {
  int token = 0;      // x~, the drafted token
  int position = 1;   // i: 1-based depth of the node in the round's draft (COOL-SD's i in [L])
  int draft_len = 1;  // L: the round's maximum draft depth
  // Target distribution at the node: after CFG, temperature, top-k and top-p, summing to 1 (the
  // distribution vanilla sampling draws from). Under greedy decoding (temperature 0) it is the
  // untempered softmax with the same top-k/top-p filtering instead, or unfiltered when the rule
  // asks (see greedy_accept, greedy_filtered).
  std::span<const float> p;
  // Draft distribution x~ was drawn from, summing to 1; empty means one-hot at `token`
  // (Jacobi's uniformly initialised drafts: the 'random' init of the SJD code,
  // tyshiwo1/Accelerating-T2I-AR-with-SJD scheduler/jacobi_iteration_lumina_mgpt.py).
  std::span<const float> q;

  double q_of(int y) const { return q.empty() ? (y == token ? 1.0 : 0.0) : q[y]; }
};

class AcceptanceRule {
 public:
  virtual ~AcceptanceRule() = default;
  virtual std::string name() const = 0;

  // f(x~; p, q, i) in [0, 1]: the draft is accepted iff u < f for a fresh uniform u.
  virtual double accept_probability(const NodeView& n) const = 0;

  // The rule's own resampling distribution at a rejection ("--resample vanilla"), unnormalised,
  // written to out (size V, every entry >= 0). The loop normalises it; when its mass is 0 the loop
  // falls back to p.
  virtual void residual(const NodeView& n, std::span<float> out) const = 0;

  // Greedy decoding: whether x~ is accepted, given p = the untempered distribution. The default is
  // x~ == argmax p (exact greedy SD); LANTERN overrides it (LANTERN (Jang et al., 2025) §4.3:
  // x~ = argmax of the distorted target).
  virtual bool greedy_accept(const NodeView& n) const;

  // Greedy decoding: whether p keeps the sampling settings' top-k/top-p filters (true: tessera's
  // default, the distribution vanilla greedy decoding takes its argmax of) or is the unfiltered
  // CFG softmax (LANTERN's published code, `--lantern-reference`).
  virtual bool greedy_filtered() const { return true; }

  // The rule as a ratio rule's descriptor (ratio_rule.h) when it is one (exact, uniform-rsd,
  // cool-sd, amplify, addition, with either resampling): what a device kernel verifies with.
  // nullopt for the rules that read tables or whole distributions (LANTERN, GSD, typical).
  virtual std::optional<RatioRule> ratio() const { return std::nullopt; }

  // G* = [p - q f]+ at a node (COOL-SD §3.2, Eq. 5; "--resample optimal"), unnormalised, into out
  // (size V): by default optimal_residual below, f evaluated token by token. A rule whose f(y)
  // shares work across tokens overrides it with the same values (GSD ranks the row once).
  virtual void g_star(const NodeView& n, std::span<float> out) const;

  // The rule as the device loop's walk applies it (walk_rule.h): a ratio rule's descriptor,
  // LANTERN's with its neighbour table, GSD's with its embedding, typical acceptance's; nullopt
  // for rules that verify on the host only.
  virtual std::optional<WalkRuleSource> walk_rule() const {
    const std::optional<RatioRule> r = ratio();
    if (!r) return std::nullopt;
    WalkRuleSource s;
    s.rule.ratio = *r;
    return s;
  }
};

// G* = Norm([p - q * f(., p, q, i)]+) (COOL-SD (Li et al., 2026) §3.2, Eq. 5), unnormalised, for
// any rule. f is evaluated only where q(y) > 0 (elsewhere the term is p(y)).
void optimal_residual(const AcceptanceRule& rule, const NodeView& n, std::span<float> out);

// Norm([p - q]+) unnormalised: the residual of exact speculative sampling (COOL-SD Eq. 2).
void exact_residual(const NodeView& n, std::span<float> out);

// A ratio rule's resampling distribution at a node, unnormalised: ratio_residual (ratio_rule.h)
// of every token.
void ratio_residual(const RatioRule& r, const NodeView& n, std::span<float> out);

}  // namespace tessera::speculative
