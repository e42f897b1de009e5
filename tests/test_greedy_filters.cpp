// Greedy decoding's target distribution (docs/methods.md, "Greedy decoding"): tessera keeps the
// top-k/top-p filters; LANTERN's published code verifies against the unfiltered CFG softmax, which
// `--lantern-reference` reproduces. With top-k 1 the filtered p is one-hot on the argmax, so no
// neighbour carries mass and greedy LANTERN must equal greedy vanilla; unfiltered, the neighbours'
// mass lets LANTERN accept drafts that are not the argmax.
#include <gtest/gtest.h>

#include "tessera/tessera.h"

using namespace tessera;

namespace {

const std::string kFixtures = std::string(TESSERA_FIXTURES);

std::vector<std::vector<int32_t>> greedy(const std::string& method, const MethodParams& params,
                                         GenerateStats* stats = nullptr) {
  LoadOptions lo;
  lo.load_decoder = false;
  lo.threads = 1;
  auto pipe = Pipeline::load(kFixtures + "/llamagen/c2i_f32", lo);
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.sampling.cfg_scale = 4.0f;
  o.sampling.top_k = 1;
  o.seed = 3;
  o.batch = 4;
  o.spec.method = method;
  o.spec.params = params;
  if (method != "vanilla") o.spec.draft_model = kFixtures + "/spec/tiny_draft";
  std::vector<Condition> conds;
  for (int i = 0; i < 8; ++i) conds.push_back(Condition::label(i));
  return pipe->generate(conds, o, stats);
}

TEST(GreedyFilters, LanternKeepsTheFiltersByDefault) {
  const auto vanilla = greedy("vanilla", {});
  // A budget that would admit most neighbours if they carried mass.
  const MethodParams wide = {{"lantern.k", int64_t{200}}, {"lantern.delta", 0.9}};
  EXPECT_EQ(greedy("lantern", wide), vanilla);
}

TEST(GreedyFilters, LanternReferenceVerifiesAgainstTheUnfilteredSoftmax) {
  const auto vanilla = greedy("vanilla", {});
  MethodParams wide = {{"lantern.k", int64_t{200}}, {"lantern.delta", 0.9}};
  wide["lantern.reference"] = true;
  GenerateStats st;
  const auto ref = greedy("lantern", wide, &st);
  EXPECT_NE(ref, vanilla);  // non-argmax drafts were accepted through their neighbours' mass
  // Same walk with an exact rule: nothing but the argmax is accepted, whatever p's filters.
  EXPECT_EQ(greedy("sd", {}), vanilla);
}

}  // namespace
