// cspd, cspd-reference and cspd-exact: continuous speculative decoding on MAR (Continuous SD, Wang
// et al., 2024; the loop is continuous/cspd_loop.cpp, the per-token math
// continuous/cspd_acceptance.cpp).
#include "speculative/method_params.h"
#include "speculative/methods/families.h"

namespace tessera::speculative {

namespace {

struct CspdOptions {
  float prefill = 0.05f;
  float inner_temperature = 42.0f;  // the published code's constant
  int test_step = -1;               // -1: half way
  int max_resample_tries = 100;
};

std::vector<ParamSpec<CspdOptions>> specs(cspd::Variant v) {
  using O = CspdOptions;
  std::vector<ParamSpec<O>> s;
  s.push_back(ParamSpec<O>("prefill", &O::prefill,
                           "Fraction of the MAR steps run by the target first (Continuous SD §3.2)")
                  .in(Range::closed(0, 1)));
  if (v == cspd::Variant::Reference)
    s.push_back(ParamSpec<O>("inner_temperature", &O::inner_temperature,
                             "The published code's inner temperature (acceptance exponent only)")
                    .in(Range::above(0)));
  if (v == cspd::Variant::Exact)
    s.push_back(ParamSpec<O>("cspd.test_step", &O::test_step,
                             "Respaced diffusion step whose transition is tested")
                    .in(Range::at_least(1))
                    .noting("< the diffusion steps")
                    .default_shown_as("half way"));
  // cspd-exact's residual sampler has no cap (a cap would change the distribution; its expected
  // cost is bounded instead, docs/methods.md), so the parameter belongs to the lossy variants.
  if (v != cspd::Variant::Exact)
    s.push_back(ParamSpec<O>("max_resample_tries", &O::max_resample_tries,
                             "Accept-reject tries before falling back to the target mean")
                    .in(Range::at_least(1)));
  return s;
}

MethodEntry entry(const char* name, const char* summary, cspd::Variant v) {
  MethodEntry e;
  e.info = {name, summary, TokenKind::Continuous, DraftSource::DraftModel,
            describe(specs(v), CspdOptions{})};
  e.make_cspd = [v](const MethodParams& given) {
    const CspdOptions o = read_params(specs(v), given, CspdOptions{});
    CspdSettings s;
    s.variant = v;
    s.prefill = o.prefill;
    s.inner_temperature = o.inner_temperature;
    s.test_step = o.test_step;
    s.max_resample_tries = o.max_resample_tries;
    return s;
  };
  return e;
}

}  // namespace

std::vector<MethodEntry> cspd_methods() {
  return {
      entry("cspd", "Continuous speculative decoding, Continuous SD Eq. 4-11 as written",
            cspd::Variant::Paper),
      entry("cspd-reference", "Continuous speculative decoding as the published code computes it",
            cspd::Variant::Reference),
      entry("cspd-exact",
            "Exact speculative sampling on one diffusion transition, finished by the target",
            cspd::Variant::Exact)};
}

}  // namespace tessera::speculative
