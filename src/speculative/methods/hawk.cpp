// hawk and hawk-vertical: drafts of Hawk's spatial heads (Chen et al., 2025; models/medusa_heads.h,
// drafters/hawk_drafter.h), a tree over the pools of cached vertical and fresh horizontal
// proposals, verified in one target forward with exact multi-draft verification (Eq. 6): lossless.
//   hawk:           horizontal and vertical heads ("Hawk (Spatial Draft Heads)", Table 1)
//   hawk-vertical:  the vertical heads only ("Hawk (Vertical Draft Heads)")
#include "speculative/method_params.h"
#include "speculative/methods/families.h"
#include "speculative/rules/rules.h"

namespace tessera::speculative {

namespace {

struct Counts {
  int horizontal = 0;  // 0: every horizontal head
  int vertical = 0;    // 0: every vertical head
  int samples = 1;
  std::string candidates = "sampled";
};

}  // namespace

std::vector<MethodEntry> hawk_methods() {
  using O = Counts;
  const ParamSpec<O> horizontal =
      ParamSpec<O>(
          "hawk.horizontal", &O::horizontal,
          "Horizontal heads drafting (depths 1..N of the tree; 0: every one the heads have)")
          .in(Range::closed(0, 64));
  const ParamSpec<O> vertical =
      ParamSpec<O>("hawk.vertical", &O::vertical,
                   "Vertical speculation depth: cached proposals from up to this many rows above "
                   "(0: every vertical head the heads have)")
          .in(Range::closed(0, 16));
  const ParamSpec<O> samples =
      ParamSpec<O>("hawk.samples", &O::samples,
                   "Candidates drawn from each member of a position's pool (Hawk's a and b)")
          .in(Range::closed(1, 16));
  const ParamSpec<O> candidates =
      ParamSpec<O>("hawk.candidates", &O::candidates,
                   "sampled: drawn from each head's q and verified against it (Hawk Eq. 6); top: "
                   "each head's most likely tokens, verified as one-hot drafts (Medusa's); both "
                   "lossless")
          .one_of({"sampled", "top"});
  auto options = [](const O& o, bool with_horizontal) {
    HawkOptions h;
    h.horizontal = !with_horizontal ? 0 : o.horizontal == 0 ? HawkOptions::kAll : o.horizontal;
    h.vertical = o.vertical == 0 ? HawkOptions::kAll : o.vertical;
    h.samples = o.samples;
    h.top = o.candidates == "top";
    return h;
  };
  const std::vector<ParamSpec<O>> both = {horizontal, vertical, samples, candidates};
  MethodEntry spatial;
  spatial.info = {"hawk",
                  "Exact speculative decoding of Hawk's spatial pools: horizontal heads and the "
                  "vertical heads' cached proposals (Chen et al., 2025)",
                  TokenKind::Discrete, DraftSource::DraftModel, describe(both, O{})};
  spatial.make_hawk = [both, options](const MethodParams& given) {
    return options(read_params(both, given, O{}), true);
  };
  const std::vector<ParamSpec<O>> only = {vertical, samples, candidates};
  MethodEntry vert;
  vert.info = {"hawk-vertical",
               "Hawk with its vertical heads only: the cached proposals of the rows above "
               "(Chen et al., 2025, Table 1's \"Vertical Draft Heads\")",
               TokenKind::Discrete, DraftSource::DraftModel, describe(only, O{})};
  vert.make_hawk = [only, options](const MethodParams& given) {
    return options(read_params(only, given, O{}), false);
  };
  for (MethodEntry* e : {&spatial, &vert}) {
    e->info.drafter = "hawk";
    e->exact = true;
    e->make_rule = [](const MethodParams&, const TargetModel&) { return make_exact_rule(); };
  }
  return {spatial, vert};
}

}  // namespace tessera::speculative
