// The speculative device loop (speculative/backend_verifier.h, issue 42) on the CPU backend, where
// it must give the host loop's images and statistics bit for bit: the same target distributions
// (distribution_rows) and the same walk (verify_rows), run where the logits are. So the
// CPU tests check the wiring a GPU runs. Rounds under a rule without a walk descriptor stay on the
// host. Per-request methods and settings in one batch: test_generation.cpp's "-device" cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "counting_backend.h"
#include "decode/guidance.h"
#include "delegating_drafter.h"
#include "models/eagle_drafter.h"
#include "models/llamagen.h"
#include "models/medusa_heads.h"
#include "speculative/chain_commit.h"
#include "speculative/draft_length.h"
#include "speculative/drafters/hawk_drafter.h"
#include "speculative/drafters/jacobi_drafter.h"
#include "speculative/drafters/medusa_drafter.h"
#include "speculative/drafters/model_drafter.h"
#include "speculative/rules/rules.h"
#include "speculative/speculative_decoder.h"
#include "speculative/tree_shape.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

const std::string kFix = TESSERA_FIXTURES;

struct Generated {
  std::vector<std::vector<int32_t>> images;
  GenerateStats stats;
};

Generated run(const SpeculativeOptions& spec, DeviceLoop loop, float temperature, int top_k = 50) {
  LoadOptions lo;
  lo.load_decoder = false;
  static std::unique_ptr<Pipeline> pipe = Pipeline::load(kFix + "/llamagen/c2i_f32", lo);
  GenerateOptions o;
  o.sampling.cfg_scale = 3.0f;
  o.sampling.temperature = temperature;
  o.sampling.top_k = top_k;
  o.seed = 5;
  o.batch = 3;
  o.spec = spec;
  o.device_loop = loop;
  std::vector<Condition> conds;
  for (int i = 0; i < 6; ++i) conds.push_back(Condition::label(i));
  Generated r;
  r.images = pipe->generate(conds, o, &r.stats);
  return r;
}

SpeculativeOptions method(const std::string& name, MethodParams params = {},
                          const std::string& tree = "") {
  SpeculativeOptions s;
  s.method = name;
  const bool heads = name == "eagle" || name == "medusa" || name == "hawk";
  if (name != "sjd" && name != "gsd")
    s.draft_model = kFix + "/spec/tiny_" + (heads ? name : "draft");
  if (!heads) s.draft_len = name == "sjd" || name == "gsd" ? 4 : 3;
  s.params = std::move(params);
  s.tree = tree;
  return s;
}

// A decoder's settings: sampling `p`, `seed`, the loop `where`.
DecoderSettings settings(const SamplingParams& p, uint64_t seed, DeviceLoop where) {
  DecoderSettings d;
  d.sampling = p;
  d.seed = seed;
  d.device_loop = where;
  return d;
}

void expect_same(const Generated& device, const Generated& host) {
  EXPECT_EQ(device.images, host.images);
  ASSERT_EQ(device.stats.per_image.size(), host.stats.per_image.size());
  for (size_t i = 0; i < host.stats.per_image.size(); ++i) {
    EXPECT_EQ(device.stats.per_image[i].proposed, host.stats.per_image[i].proposed) << i;
    EXPECT_EQ(device.stats.per_image[i].accepted, host.stats.per_image[i].accepted) << i;
    EXPECT_EQ(device.stats.per_image[i].accepted_depth, host.stats.per_image[i].accepted_depth)
        << i;
    EXPECT_EQ(device.stats.per_image[i].draft_nodes, host.stats.per_image[i].draft_nodes) << i;
    EXPECT_EQ(device.stats.per_image[i].rounds_by_depth, host.stats.per_image[i].rounds_by_depth)
        << i;
    EXPECT_EQ(device.stats.per_image[i].rounds, host.stats.per_image[i].rounds) << i;
    EXPECT_EQ(device.stats.per_image[i].draft_forwards, host.stats.per_image[i].draft_forwards)
        << i;
    EXPECT_EQ(device.stats.per_image[i].target_forwards, host.stats.per_image[i].target_forwards)
        << i;
  }
  EXPECT_EQ(host.stats.device_rounds, 0);
}

}  // namespace

// Every ratio rule (each method's default resampling and the other) and LANTERN in its forms
// (paper, reference code, LANTERN++ in both λ conventions), sampled and greedy; a draft model's
// chains, static and dynamic trees, Jacobi windows, EAGLE's and Medusa's trees and Hawk's (its
// siblings drawn with replacement): the device loop verifies every round and makes the host
// loop's images; the rules reject drafts, so the residual draws (and, in trees, the siblings
// tested after a rejection) are covered.
TEST(DeviceRounds, MakeTheHostLoopsImages) {
  struct Case {
    SpeculativeOptions spec;
    float temperature;
    int top_k = 50;
  };
  std::vector<Case> cases = {
      {method("sd"), 1.0f},
      {method("sd"), 0.0f},
      {method("cool-sd", {{"cool.delta", 1.5}}), 1.0f},
      {method("uniform-rsd", {{"rsd.delta", 1.5}}), 1.0f},
      {method("amplify", {{"amplify.k", 2.0}}), 1.0f},
      {method("addition", {{"addition.eps", 0.05}}), 1.0f},
      {method("cool-sd", {{"cool.delta", 1.5}}), 0.0f},
      {method("sjd"), 1.0f},
      // GSD with bounds loose enough that clusters hold more than the drafted token.
      {method("gsd", {{"gsd.g", int64_t{10}}, {"gsd.d", 1e6}, {"gsd.delta", 1.0}}), 1.0f},
      {method(
           "gsd",
           {{"gsd.g", int64_t{14}}, {"gsd.d", 1e6}, {"gsd.delta", 1.0}, {"gsd.reference", true}}),
       1.0f},
      {method("gsd"), 0.0f},
      {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}), 1.0f},
      {method("lantern", {{"lantern.k", int64_t{8}}, {"lantern.delta", 0.4}}), 0.0f},
      {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.reference", true}}), 1.0f},
      {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.reference", true}}), 0.0f},
      {method("lantern++", {{"lantern.k", int64_t{6}}, {"lantern.lambda", 2.0}}), 1.0f},
      {method("sd", {}, "kary:2,2"), 1.0f},
      {method("sd", {}, "kary:2,2"), 0.0f},
      // Top-k 2 under three children a node: the third never has a token (the device loop's
      // trees hold it as a missing node, the host loop's leave it out).
      {method("sd", {}, "kary:3,2"), 1.0f, 2},
      {method("sd", {}, "kary:3,2"), 0.0f, 2},
      {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}, "kary:3,2"), 1.0f, 2},
      {method("eagle", {}, "kary:3,2"), 1.0f, 2},
      {method("eagle", {}, "kary:3,2"), 0.0f, 2},
      {method("sd", {}, "dynamic:2,3,8"), 1.0f},
      {method("sd", {}, "dynamic:2,3,8"), 0.0f},
      {method("eagle", {}, "dynamic:2,3,8"), 1.0f},
      {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}, "kary:3,2"), 1.0f},
      {method("lantern++", {{"lantern.k", int64_t{6}}, {"lantern.reference", true}}, "kary:2,2"),
       1.0f},
      {method("eagle"), 1.0f},
      {method("medusa"), 1.0f},
      // Medusa's trees on the device loop are the whole shape: at top-k 2 every node's third
      // child has no token (a missing node there, left out on the host).
      {method("medusa", {}, "kary:3,2"), 1.0f, 2},
      {method("medusa", {}, "kary:3,2"), 0.0f, 2},
      {[] {
         SpeculativeOptions s = method("medusa", {{"typical.eps", 0.3}, {"typical.alpha", 0.5}});
         s.method = "medusa-typical";
         return s;
       }(),
       1.0f},
      {method("hawk"), 1.0f},
      {method(
           "lantern++",
           {{"lantern.k", int64_t{6}}, {"lantern.lambda", 3.0}, {"lantern.lambda_rule", "code"}}),
       1.0f},
  };
  cases.push_back(cases[3]);
  cases.back().spec.resample = "vanilla";
  // LANTERN and typical acceptance under G* (optimal_residual_row), sampled drafts and trees.
  for (const std::string tree : {"", "kary:2,2"}) {
    cases.push_back(
        {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}, tree), 1.0f});
    cases.back().spec.resample = "optimal";
  }
  cases.push_back({method("medusa", {{"typical.eps", 0.3}, {"typical.alpha", 0.5}}), 1.0f});
  cases.back().spec.method = "medusa-typical";
  cases.back().spec.resample = "optimal";
  cases.push_back(
      {method("medusa", {{"typical.eps", 0.3}, {"typical.alpha", 0.5}}, "kary:3,2"), 1.0f, 2});
  cases.back().spec.method = "medusa-typical";
  // Hawk: sampled candidates drawn where the cache's rows are (greedy: one-hot rows), under
  // --draft-len auto too (the slots' Σ q² come back for the node budget); its deterministic
  // candidates (host rounds on the device loop, chosen from the slots' rows read back); two
  // samples a pool member.
  cases.push_back({method("hawk"), 0.0f});
  cases.push_back({method("hawk"), 1.0f});
  cases.back().spec.draft_len = kDraftLenAuto;
  for (int k = 1; k <= 13; ++k) cases.back().spec.auto_costs.verify.push_back(1.0 + 0.25 * k);
  cases.push_back({method("hawk", {{"hawk.candidates", "top"}}), 1.0f});
  cases.push_back({method("hawk", {{"hawk.samples", int64_t{2}}}), 1.0f});
  int rejected_rounds = 0, sibling_tests = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec.method + " tree '" + c.spec.tree + "' resample '" + c.spec.resample +
                 "' temperature " + std::to_string(c.temperature) + " top-k " +
                 std::to_string(c.top_k));
    const Generated host = run(c.spec, DeviceLoop::Off, c.temperature, c.top_k);
    const Generated device = run(c.spec, DeviceLoop::On, c.temperature, c.top_k);
    expect_same(device, host);
    const int64_t prefills = 2;  // 6 images, 3 at a time
    EXPECT_EQ(device.stats.device_rounds, device.stats.forward_passes - prefills)
        << "every round on the device";
    EXPECT_GT(device.stats.device_rounds, 0);
    for (const ImageStats& im : host.stats.per_image)
      for (size_t d = 0; d < im.proposed.size(); ++d)
        rejected_rounds +=
            static_cast<int>(im.proposed[d] - (d < im.accepted.size() ? im.accepted[d] : 0));
    // A chain's round tests its accepted drafts and at most one more: drafts tested beyond that
    // are siblings tested after a rejection (a lower bound on them).
    for (const ImageStats& im : host.stats.per_image) {
      int64_t beyond = -im.rounds;
      for (int64_t x : im.proposed) beyond += x;
      for (int64_t x : im.accepted) beyond -= x;
      sibling_tests += static_cast<int>(std::max<int64_t>(0, beyond));
    }
  }
  EXPECT_GT(rejected_rounds, 100) << "rejections (residual draws) were verified";
  EXPECT_GT(sibling_tests, 50) << "siblings tested after a rejection";
}

// GSD under G* (each f(y) from one ranking of the row, gsd_math.h) verifies on the device, its
// Jacobi windows in bursts, with the host loop's images: the carried drafts' q are whole rows, so
// a rejection's G* ranks the row.
TEST(DeviceRounds, GsdUnderGStarVerifiesOnTheDevice) {
  SpeculativeOptions gsd_g = method("gsd", {{"gsd.g", int64_t{6}}});
  gsd_g.resample = "optimal";
  const Generated host = run(gsd_g, DeviceLoop::Off, 1.0f);
  const Generated device = run(gsd_g, DeviceLoop::On, 1.0f);
  expect_same(device, host);
  const int64_t prefills = 2;  // 6 images, 3 at a time
  EXPECT_EQ(device.stats.device_rounds, device.stats.forward_passes - prefills);
  EXPECT_GT(device.stats.burst_rounds, 0) << "GSD under G* bursts";
  int64_t rejected = 0;
  for (const ImageStats& im : host.stats.per_image)
    for (size_t d = 0; d < im.proposed.size(); ++d)
      rejected += im.proposed[d] - (d < im.accepted.size() ? im.accepted[d] : 0);
  EXPECT_GT(rejected, 50) << "rejections resampled from G*";
}

namespace {

// A rule the walk has no descriptor for: the exact rule, verified on the host.
class HostOnlyRule final : public speculative::AcceptanceRule {
 public:
  std::string name() const override { return "host-only"; }
  double accept_probability(const speculative::NodeView& n) const override {
    return exact_->accept_probability(n);
  }
  void residual(const speculative::NodeView& n, std::span<float> out) const override {
    exact_->residual(n, out);
  }
  std::optional<speculative::WalkRuleSource> walk_rule() const override { return std::nullopt; }

 private:
  std::unique_ptr<speculative::AcceptanceRule> exact_ = speculative::make_exact_rule();
};

}  // namespace

// GSD with a window wider than the one-pass form holds (gsd_math.h: the host rule's heaps, the
// walk's passes) verifies on the device, with the host loop's images.
TEST(DeviceRounds, WideGsdWindowsVerifyOnTheDevice) {
  const SpeculativeOptions wide =
      method("gsd", {{"gsd.g", int64_t{2 * speculative::kGsdMaxHalf + 2}}});
  const Generated host = run(wide, DeviceLoop::Off, 1.0f);
  const Generated device = run(wide, DeviceLoop::On, 1.0f);
  expect_same(device, host);
  EXPECT_GT(device.stats.device_rounds, 0);
}

namespace {

// Counts the draft nodes whose distribution stayed with the drafter (DraftNode::q_row) and those
// drawn on the host.
class DeviceDraftCounter : public test::DelegatingDrafter {
 public:
  using DelegatingDrafter::DelegatingDrafter;
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    inner_.propose(active, max_depth, trees);
    drafting_rounds += std::any_of(trees.begin(), trees.end(),
                                   [](const speculative::DraftTree& t) { return !t.empty(); });
    for (const speculative::DraftTree& tree : trees)
      for (const speculative::DraftNode& node : tree) {
        if (node.q_row >= 0) {
          ++on_device;
          EXPECT_TRUE(node.q.empty());
          // Nothing came back: the token reaches the host with the round's verdicts.
          EXPECT_EQ(node.token, speculative::kTokenOnDevice);
        } else {
          ++on_host;
        }
      }
  }
  int on_device = 0, on_host = 0;
  int64_t drafting_rounds = 0;  // rounds in which some image drafted
};

struct Drafted {
  std::vector<std::vector<int32_t>> images;
  GenerateStats stats;
  int on_device = 0, on_host = 0;  // draft nodes
  int64_t drafting_rounds = 0;
};

// Images of labels 0..n-1 (modulo `classes` if given), image index i for label i, through `dec`.
std::vector<std::vector<int32_t>> generate_labels(Decoder& dec, int n, GenerateStats& stats,
                                                  int classes = 0) {
  std::vector<Condition> conds;
  std::vector<const Condition*> ptrs;
  std::vector<uint64_t> index;
  for (int i = 0; i < n; ++i) conds.push_back(Condition::label(classes > 0 ? i % classes : i));
  for (int i = 0; i < n; ++i) {
    ptrs.push_back(&conds[i]);
    index.push_back(static_cast<uint64_t>(i));
  }
  return generate_all(dec, ptrs, index, stats);
}

// Four images of the tiny fixture, sd with a draft model (chains of 3), through the loop. The
// tiny draft is rejected at once; the target drafting for itself is accepted.
Drafted draft_and_verify(DeviceLoop where, const std::string& draft_model = "/spec/tiny_draft",
                         const speculative::AcceptanceRule* with_rule = nullptr) {
  const ModelConfig tc = load_model_config(kFix + "/llamagen/c2i_f32");
  const ModelConfig dc = load_model_config(kFix + draft_model);
  LlamaGen target(tc, cpu_backend()), draft(dc, cpu_backend());
  SamplingOptions so;
  so.cfg_scale = 3.0f;
  so.top_k = 50;
  so.temperature = 1.0f;
  const SamplingParams p = to_sampling_params(so);
  constexpr int kImages = 4;
  speculative::ModelDrafter drafter(draft, p, 3, kImages);
  DeviceDraftCounter counting(drafter);
  const auto rule = speculative::make_exact_rule();
  speculative::LoopSettings loop;
  loop.rule = with_rule ? with_rule : rule.get();
  loop.drafter = &counting;
  loop.draft_len = 3;
  DecoderSettings d = settings(p, 9, where);
  Drafted out;
  speculative::SpeculativeDecoder dec(target, kImages, d, loop, out.stats);
  out.images = generate_labels(dec, kImages, out.stats);
  out.on_device = counting.on_device;
  out.on_host = counting.on_host;
  out.drafting_rounds = counting.drafting_rounds;
  return out;
}

}  // namespace

// In a round the device loop verifies, the draft model drafts on the device too: every node names
// its row of the drafter's device_q() instead of carrying q to the host, the draws write the next
// forward's tokens there (the chain's forwards run from inputs prepared once, positions and cache
// lengths advanced on the device), and the images are the host loop's.
TEST(DeviceRounds, DraftModelChainsDraftOnTheDevice) {
  for (const std::string draft_model : {"/spec/tiny_draft", "/llamagen/c2i_f32"}) {
    SCOPED_TRACE(draft_model);
    const Drafted host = draft_and_verify(DeviceLoop::Off, draft_model);
    const Drafted device = draft_and_verify(DeviceLoop::On, draft_model);
    EXPECT_EQ(device.images, host.images);
    EXPECT_EQ(host.on_device, 0);
    EXPECT_GT(device.on_device, 40);
    EXPECT_EQ(device.on_host, 0);
    EXPECT_EQ(device.stats.device_rounds, device.stats.forward_passes - 1);
    // Every round that drafts (not those at an image's end) drawn on the device, as one burst
    // (the CPU captures no graph); the draft forwards counted as the host loop counts them.
    EXPECT_EQ(device.stats.device_drafted_rounds, device.drafting_rounds);
    EXPECT_GE(device.stats.device_drafted_rounds, 4);
    EXPECT_EQ(device.stats.replayed_draft_rounds, 0);
    EXPECT_EQ(host.stats.device_drafted_rounds, 0);
    EXPECT_EQ(device.stats.draft_forward_passes, host.stats.draft_forward_passes);
  }
  // The target drafting for itself: drafts accepted, so the committed tokens include tokens
  // drawn on the device (which reach the host only with the verdicts).
  EXPECT_GT(draft_and_verify(DeviceLoop::On, "/llamagen/c2i_f32").stats.mean_accepted_length(),
            2.0);
}

// A rule without a walk descriptor: its rounds verify on the host under --device-loop on, with
// the host loop's images.
TEST(DeviceRounds, RulesWithoutAWalkStayOnTheHost) {
  const HostOnlyRule rule;
  const Drafted host = draft_and_verify(DeviceLoop::Off, "/llamagen/c2i_f32", &rule);
  const Drafted device = draft_and_verify(DeviceLoop::On, "/llamagen/c2i_f32", &rule);
  EXPECT_EQ(device.images, host.images);
  EXPECT_EQ(device.stats.device_rounds, 0);
  EXPECT_EQ(device.stats.burst_rounds, 0);
  EXPECT_GT(device.stats.mean_accepted_length(), 2.0);
}

// A round the device loop drafts and verifies reads back once (issue 42's "at most one copy back
// per round"): sd's drafted tokens go from the draft model's rows into the target pass's inputs
// and the walk's nodes on the device, and come back with the verdicts; sjd's carry-over draws are
// made there beside the walk and come back with them, their q staying there. Two images, guided,
// after the first round has settled the buffers.
TEST(DeviceRounds, ARoundReadsBackOnce) {
  const ModelConfig tc = load_model_config(kFix + "/llamagen/c2i_f32");
  const ModelConfig dc = load_model_config(kFix + "/spec/tiny_draft");
  for (const std::string kind : {"sd", "sjd", "eagle"}) {
    SCOPED_TRACE(kind);
    const bool jacobi = kind == "sjd", eagle = kind == "eagle";
    test::CountingBackend counting;
    LlamaGen target(tc, counting), draft(dc, counting);
    // EAGLE's chain: its features (the target's, f^) stay on the backend too.
    EagleDrafterModel eagle_model(load_model_config(kFix + "/spec/tiny_eagle"), target);
    SamplingOptions so;
    so.cfg_scale = 3.0f;
    so.top_k = 50;
    const SamplingParams p = to_sampling_params(so);
    speculative::ModelDrafter model_drafter =
        eagle ? speculative::ModelDrafter(eagle_model, p, 3, 2, std::nullopt,
                                          {eagle_model.feature(), eagle_model.prefix_token()})
              : speculative::ModelDrafter(draft, p, 3, 2);
    speculative::JacobiDrafter jacobi_drafter(tc.gpt.vocab_size, p);
    const auto rule = speculative::make_exact_rule();
    speculative::LoopSettings loop;
    loop.rule = rule.get();
    loop.drafter = jacobi ? static_cast<speculative::Drafter*>(&jacobi_drafter) : &model_drafter;
    loop.draft_len = jacobi ? 5 : 3;
    DecoderSettings d = settings(p, 4, DeviceLoop::On);
    d.device_burst = 1;  // a round a step (ChainRoundsRunInBursts: a burst's one read)
    GenerateStats stats;
    speculative::SpeculativeDecoder dec(target, 2, d, loop, stats);
    const int a = dec.add(Condition::label(1), 0), b = dec.add(Condition::label(2), 1);
    ASSERT_TRUE(dec.step());  // the prefills
    ASSERT_TRUE(dec.step());  // a first round
    int carried = 0;
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      carried +=
          jacobi_drafter.carried_drafts(dec.image(a)) + jacobi_drafter.carried_drafts(dec.image(b));
      const GenerateStats before = stats;
      counting.downloads = counting.syncs = 0;
      ASSERT_TRUE(dec.step());
      EXPECT_EQ(stats.device_rounds - before.device_rounds, 1);
      EXPECT_EQ(stats.device_drafted_rounds - before.device_drafted_rounds, jacobi ? 0 : 1);
      EXPECT_EQ(counting.downloads, 1);
      EXPECT_EQ(counting.syncs, 0);
    }
    // Jacobi carried drafts over (rejections at depth < L - 1), named by their device rows.
    if (jacobi) {
      EXPECT_GT(carried, 0) << "windows carried drafts over, by their device rows";
    }
  }
}

// Draft heads (Medusa's, Hawk's) read the target's hidden states where they are: a round moves
// the rows they need on the backend, and the heads' distributions are computed there too
// (HeadRows). Medusa's round reads back the verdicts only (its ranked ids stay there). So does
// Hawk's with sampled candidates: its speculation cache keeps its q rows there, each slot's token
// is drawn there and the walk reads the rows there; under --draft-len auto the slots' Σ q² (the
// nodes' values the budget reads) come back first. Hawk's deterministic candidates (--hawk-top)
// are chosen on the host from the slots' rows, read back with the heads' flag. Before, each
// image's rows came to the host (a wait per half), and Hawk's heads' distributions came back
// whole, a horizontal and a vertical forward's per image.
TEST(DeviceRounds, DraftHeadsReadTheirFeaturesOnTheDevice) {
  const ModelConfig tc = load_model_config(kFix + "/llamagen/c2i_f32");
  enum Heads { kMedusa, kHawk, kHawkAuto, kHawkTop };
  for (const Heads heads_of : {kMedusa, kHawk, kHawkAuto, kHawkTop}) {
    const bool hawk = heads_of != kMedusa;
    const char* const names[] = {"medusa", "hawk", "hawk auto", "hawk top"};
    SCOPED_TRACE(names[heads_of]);
    test::CountingBackend counting;
    LlamaGen target(tc, counting);
    const MedusaHeads heads(
        load_model_config(kFix + (hawk ? "/spec/tiny_hawk" : "/spec/tiny_medusa")), target);
    SamplingOptions so;
    so.cfg_scale = 3.0f;
    so.top_k = 50;
    const SamplingParams p = to_sampling_params(so);
    std::unique_ptr<speculative::Drafter> drafter;
    if (hawk)
      drafter = std::make_unique<speculative::HawkDrafter>(
          heads, p, speculative::HawkOptions{2, 1, 1, heads_of == kHawkTop},
          speculative::load_tree_shape("kary:2,2"), target.info().n_tokens);
    else
      drafter = std::make_unique<speculative::MedusaDrafter>(
          heads, p, speculative::load_tree_shape("chain:3"), 2);
    const auto rule = speculative::make_exact_rule();
    speculative::RoundCosts costs;
    for (int k = 1; k <= 8; ++k) costs.verify.push_back(1.0 + 0.01 * (k - 1));
    const speculative::DraftLengthPolicy policy(costs, 2);
    speculative::LoopSettings loop;
    loop.rule = rule.get();
    loop.drafter = drafter.get();
    loop.draft_len = hawk ? 2 : 3;
    if (heads_of == kHawkAuto) loop.policy = &policy;
    DecoderSettings d = settings(p, 4, DeviceLoop::On);
    GenerateStats stats;
    speculative::SpeculativeDecoder dec(target, 2, d, loop, stats);
    dec.add(Condition::label(1), 0);
    dec.add(Condition::label(2), 1);
    ASSERT_TRUE(dec.step());  // the prefills
    for (int round = 0; round < 3; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      const GenerateStats before = stats;
      counting.downloads = counting.syncs = counting.writes = 0;
      ASSERT_TRUE(dec.step());
      EXPECT_EQ(stats.device_rounds - before.device_rounds, 1);
      // No wait before any download; the verdicts last.
      EXPECT_EQ(counting.syncs, 0);
      const int downloads[] = {1, 1, 2, 3};  // hawk top: the flag, the slots' rows, the verdicts
      EXPECT_EQ(counting.downloads, downloads[heads_of]);
      EXPECT_EQ(stats.device_drafted_rounds - before.device_drafted_rounds,
                heads_of == kHawkTop ? 0 : 1);
    }
  }
}

// Trees are drafted where the drafter's logits are on the device loop. Dynamic trees (EAGLE-2's,
// of the EAGLE drafter and of a draft model) rank their candidates there: each expansion reads
// back K ids and their mass a row. Static trees draw each depth's children there without
// replacement (draw_children_rows), their q rows and tokens left there for the next depth's
// forward, the target pass and the walk: nothing comes back before the verdicts, which bring the
// tokens. Never the rows of logits, which the host loop reads (the catch-up's and every later
// forward's). MakeTheHostLoopsImages checks that both make the same trees. The EAGLE drafter's
// features (the target's for committed pairs, its own f^ for drafted nodes) stay on the backend
// either way: a device round waits for nothing and reads back once (a static tree: the verdicts,
// which bring the tokens) or twice (a dynamic tree: the best candidates after the last expansion,
// whose tokens and structure the target pass needs, then the verdicts).
TEST(DeviceRounds, TreesDraftWhereTheLogitsAre) {
  const ModelConfig tc = load_model_config(kFix + "/llamagen/c2i_f32");
  const int V = tc.gpt.vocab_size;
  for (const std::string spec : {"dynamic:2,3,8", "kary:2,2"})
    for (const bool eagle : {false, true})
      for (const DeviceLoop where : {DeviceLoop::Off, DeviceLoop::On}) {
        SCOPED_TRACE(spec + (eagle ? ", eagle" : ", draft model") +
                     (where == DeviceLoop::On ? ", device loop" : ", host loop"));
        test::CountingBackend counting;
        LlamaGen target(tc, counting);
        std::unique_ptr<AutoregressiveModel> draft;
        speculative::FeatureInputs features;
        if (eagle) {
          auto e = std::make_unique<EagleDrafterModel>(load_model_config(kFix + "/spec/tiny_eagle"),
                                                       target);
          features = {e->feature(), e->prefix_token()};
          draft = std::move(e);
        } else {
          draft =
              std::make_unique<LlamaGen>(load_model_config(kFix + "/spec/tiny_draft"), counting);
        }
        SamplingOptions so;
        so.cfg_scale = 3.0f;
        so.top_k = 50;
        const SamplingParams p = to_sampling_params(so);
        const speculative::TreeSpec tree = speculative::load_tree_spec(spec);
        speculative::ModelDrafter drafter(*draft, p, 3, 2, tree, features);
        const auto rule = speculative::make_exact_rule();
        speculative::LoopSettings loop;
        loop.rule = rule.get();
        loop.drafter = &drafter;
        loop.draft_len = 3;
        DecoderSettings d = settings(p, 4, where);
        GenerateStats stats;
        speculative::SpeculativeDecoder dec(target, 2, d, loop, stats);
        dec.add(Condition::label(1), 0);
        dec.add(Condition::label(2), 1);
        ASSERT_TRUE(dec.step());  // the prefills
        counting.watch_width = V;
        for (int round = 0; round < 3; ++round) {
          SCOPED_TRACE("round " + std::to_string(round));
          counting.watched_downloads = counting.downloads = counting.syncs = 0;
          const int64_t forwards = drafter.batched_forwards(),
                        drafted = stats.device_drafted_rounds;
          ASSERT_TRUE(dec.step());
          // The catch-up, then 2 expansions (dynamic) or the depth-1 nodes' forward (kary:2,2);
          // EAGLE's catch-up may take more forwards: only its last one's rows are read.
          const int read = spec[0] == 'd' ? 3 : 2;
          EXPECT_EQ(stats.device_drafted_rounds - drafted, where == DeviceLoop::On ? 1 : 0);
          if (where == DeviceLoop::On) {
            // A dynamic tree: its best candidates, then the verdicts. A static tree: the
            // verdicts only (its tokens come back with them).
            EXPECT_EQ(counting.syncs, 0);
            EXPECT_EQ(counting.downloads, spec[0] == 'd' ? 2 : 1);
          }
          EXPECT_GE(drafter.batched_forwards() - forwards, read);
          EXPECT_EQ(counting.watched_downloads,
                    where == DeviceLoop::On ? 0 : read + 1);  // host: the target's too
        }
      }
}

namespace {

// Every drafted tree as the verifier saw it (tokens, parents, depths), in order.
class TreeRecorder final : public test::DelegatingDrafter {
 public:
  using DelegatingDrafter::DelegatingDrafter;
  std::vector<int32_t> drafted;
  int drafting_rounds = 0, deep_accepts = 0;  // rounds with drafts; images accepting 2 or more
  int missing = 0;                            // kTokenMissing nodes
  void propose(std::span<ImageState* const> active, std::span<const int> max_depth,
               std::vector<speculative::DraftTree>& trees) override {
    DelegatingDrafter::propose(active, max_depth, trees);
    drafting_rounds +=
        std::any_of(trees.begin(), trees.end(), [](const auto& t) { return !t.empty(); });
  }
  void finish_round(ImageState& im, const speculative::DraftTree& tree,
                    const speculative::VerifyOutcome& out,
                    const speculative::TargetRound& target) override {
    deep_accepts += out.accepted.size() >= 2;
    drafted.push_back(-1 - im.id);
    // The device loop's static trees hold the children drawn without a token left as missing
    // nodes, which the host loop's leave out: recorded without them, parents renumbered.
    std::vector<int> index(tree.size(), -1);
    int kept = 0;
    for (size_t c = 0; c < tree.size(); ++c) {
      const speculative::DraftNode& n = tree[c];
      if (n.token == speculative::kTokenMissing) {
        ++missing;
        continue;
      }
      index[c] = kept++;
      drafted.insert(drafted.end(), {n.token, n.parent < 0 ? -1 : index[n.parent], n.depth});
    }
    DelegatingDrafter::finish_round(im, tree, out, target);
  }
};

struct Recorded {
  std::vector<int32_t> drafted;
  int drafting_rounds = 0, deep_accepts = 0, missing = 0;
  GenerateStats stats;
};

// Three images join a running batch one after another (uneven catch-ups: one image feeds one
// token or pair while the others feed several), drafted by `drafter_dir` (the target itself:
// most drafts accepted, so later draws depend on earlier ones; or the EAGLE drafter).
Recorded record_drafts(DeviceLoop where, const std::string& drafter_dir, const std::string& tree,
                       int top_k) {
  const ModelConfig tc = load_model_config(kFix + "/llamagen/c2i_f32");
  Backend& be = cpu_backend();
  LlamaGen target(tc, be);
  const bool eagle = drafter_dir.find("eagle") != std::string::npos;
  std::unique_ptr<AutoregressiveModel> draft;
  speculative::FeatureInputs features;
  if (eagle) {
    auto e = std::make_unique<EagleDrafterModel>(load_model_config(kFix + drafter_dir), target);
    features = {e->feature(), e->prefix_token()};
    draft = std::move(e);
  } else {
    draft = std::make_unique<LlamaGen>(load_model_config(kFix + drafter_dir), be);
  }
  SamplingOptions so;
  so.cfg_scale = 3.0f;
  so.top_k = top_k;
  const SamplingParams p = to_sampling_params(so);
  std::optional<speculative::TreeSpec> spec;
  if (!tree.empty()) spec = speculative::load_tree_spec(tree);
  speculative::ModelDrafter drafter(*draft, p, 3, 3, spec, features);
  TreeRecorder recorder(drafter);
  const auto rule = speculative::make_exact_rule();
  speculative::LoopSettings loop;
  loop.rule = rule.get();
  loop.drafter = &recorder;
  loop.draft_len = 3;
  DecoderSettings d = settings(p, 9, where);
  Recorded r;
  speculative::SpeculativeDecoder dec(target, 3, d, loop, r.stats);
  dec.add(Condition::label(1), 0);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(dec.step());
  dec.add(Condition::label(2), 1);
  for (int k = 0; k < 2; ++k) EXPECT_TRUE(dec.step());
  dec.add(Condition::label(3), 2);
  while (dec.step()) {
  }
  r.drafted = std::move(recorder.drafted);
  r.drafting_rounds = recorder.drafting_rounds;
  r.deep_accepts = recorder.deep_accepts;
  r.missing = recorder.missing;
  return r;
}

}  // namespace

// The device loop drafts the host loop's trees, node for node: chains, dynamic and static trees,
// of a draft model and of the EAGLE drafter (whose later nodes read f^ from the forwards before
// them), while images join a running batch (catch-ups that give a slot several rows, gathered to
// the roots on the device). Every round drafts there.
TEST(DeviceRounds, DraftsAreTheHostLoopsDrafts) {
  for (const std::string drafter : {"/llamagen/c2i_f32", "/spec/tiny_eagle"})
    for (const std::string tree : {"", "dynamic:2,3,8", "kary:2,2", "kary:3,2 top-k 2"}) {
      SCOPED_TRACE(drafter + " tree '" + tree + "'");
      // Top-k 2 under three children a node: every third child has no token left.
      const bool short_rows = tree.ends_with("top-k 2");
      const std::string shape = short_rows ? tree.substr(0, tree.find(' ')) : tree;
      const int top_k = short_rows ? 2 : 50;
      const Recorded host = record_drafts(DeviceLoop::Off, drafter, shape, top_k);
      const Recorded device = record_drafts(DeviceLoop::On, drafter, shape, top_k);
      EXPECT_EQ(host.missing, 0);
      if (short_rows) {
        EXPECT_GT(device.missing, device.drafting_rounds);  // a root's third child, at least
      } else {
        EXPECT_EQ(device.missing, 0);
      }
      EXPECT_EQ(device.drafted, host.drafted);
      EXPECT_GT(host.drafted.size(), 100u);
      EXPECT_EQ(host.stats.device_drafted_rounds, 0);
      EXPECT_EQ(device.stats.device_drafted_rounds, device.drafting_rounds);
      EXPECT_GE(device.drafting_rounds, 6);
      if (drafter == "/llamagen/c2i_f32") {  // drafting for itself: deep drafts accepted
        EXPECT_GT(host.deep_accepts, 5);
      }
    }
}

// Jacobi's carry-over after a device round: the draws made there are the window's tokens, and q
// stays there as rows of that round's distributions; a round the host verifies next (another
// image's rule has no walk) downloads those rows into q instead.
TEST(DeviceRounds, JacobiCarriesTheDeviceRowsOrDownloadsThem) {
  constexpr int V = 6, rows = 4;  // one image, root + 3 drafts
  std::vector<float> dist(static_cast<size_t>(2 * rows) * V);
  for (size_t i = 0; i < dist.size(); ++i) dist[i] = static_cast<float>(i % 7 + 1);
  test::CountingBackend counting;
  Tensor on_device = counting.upload(dist.data(), DType::F32, {2 * rows, V});
  on_device.backend = &counting;
  SamplingParams p;
  speculative::JacobiDrafter drafter(V, p);
  ImageState im;
  im.tokens = {1, 2, 3};
  speculative::DraftTree tree(3);
  for (int c = 0; c < 3; ++c) tree[c].parent = c - 1, tree[c].depth = c + 1, tree[c].token = c;
  speculative::VerifyOutcome out;
  out.accepted = {0};  // rejected at depth 2: rows 2 and 3 carry over
  out.rejected = true;
  const std::vector<int32_t> carried = {-7, 4, 5};  // row r's draw at r - 1
  for (const bool device_next : {true, false}) {
    SCOPED_TRACE(device_next ? "device round next" : "host round next");
    speculative::TargetRound target;
    target.device_dist = &on_device;
    target.device_row0 = rows;  // the image's rows are the second block
    target.carried = carried;
    target.dist = [](int) -> std::span<const float> {
      ADD_FAILURE() << "a device round's carry-over read a distribution on the host";
      return {};
    };
    drafter.finish_round(im, tree, out, target);
    EXPECT_EQ(drafter.carried_drafts(im), 2);
    drafter.set_device_drafts(device_next);
    std::vector<ImageState*> active = {&im};
    std::vector<speculative::DraftTree> trees;
    const std::vector<int> depth = {3};
    counting.downloads = 0;
    drafter.propose(active, depth, trees);
    EXPECT_EQ(counting.downloads, device_next ? 0 : 1) << "the carried rows in one download";
    ASSERT_EQ(trees.size(), 1u);
    ASSERT_EQ(trees[0].size(), 3u);
    for (int d = 0; d < 2; ++d) {
      const speculative::DraftNode& node = trees[0][d];
      const int r = d + 2;
      EXPECT_EQ(node.token, carried[r - 1]);
      if (device_next) {
        EXPECT_EQ(node.q_row, rows + r);
        EXPECT_TRUE(node.q.empty());
      } else {
        EXPECT_EQ(node.q_row, -1);
        const std::vector<float> want(dist.begin() + (rows + r) * V,
                                      dist.begin() + (rows + r + 1) * V);
        EXPECT_EQ(node.q, want);
      }
    }
    EXPECT_TRUE(trees[0][2].q.empty() && trees[0][2].q_row < 0);  // a fresh position: one-hot
    ASSERT_EQ(drafter.device_rows() != nullptr, device_next);
    if (device_next) {
      EXPECT_EQ(drafter.device_rows()->q.data, on_device.data);
    }
  }
}

// The device draft chain's graphs are keyed by shape: no two (images, depth, key mask) share a
// key at any depth a chain can have (--draft-len up to the image's tokens). A shared key would
// replay another shape's graph: other slots' caches and rows written at the other layout's offsets.
TEST(DeviceRounds, DraftChainGraphKeysNeverCollide) {
  for (const int n_tokens : {16, 256}) {
    std::set<int> keys;
    int shapes = 0;
    for (int images = 1; images <= 16; ++images)
      for (int depth = 1; depth < n_tokens; ++depth)
        for (const bool visible : {false, true}) {
          keys.insert(speculative::device_chain_graph_key(images, depth, visible, n_tokens));
          ++shapes;
        }
    EXPECT_EQ(static_cast<int>(keys.size()), shapes) << n_tokens << " tokens";
  }
}

namespace {

// Nine whole images of the fixture, three at a time, through the speculative loop on `be`: a draft
// model's chains ("chain"; "micro": the four-token pair's) or static trees ("tree"), EAGLE's chains
// ("eagle", reading the target pass's hidden states) or Jacobi's windows ("sjd", carrying draws
// over; "micro-sjd": the four-token target's), exact rule, guided. With `drive`, it steps the
// decoder instead (no images returned); `configure` edits the loop's settings; `grid` > 0 makes the
// images grid x grid tokens (both models' rotary tables).
using Drive = std::function<void(speculative::SpeculativeDecoder&, GenerateStats&)>;
using Configure = std::function<void(speculative::LoopSettings&)>;
Generated whole_images(const std::string& kind, Backend& be, DeviceLoop where,
                       const Drive& drive = {}, const Configure& configure = {}, int grid = 0) {
  auto config = [grid](const std::string& dir) {
    ModelConfig c = load_model_config(dir);
    if (grid > 0) c.gpt.image_size = (c.gpt.grid = grid) * c.gpt.downsample;
    return c;
  };
  const bool micro = kind == "micro" || kind == "micro-sjd";
  const bool windows = kind == "sjd" || kind == "micro-sjd";
  const ModelConfig tc = config(kFix + (micro ? "/spec/micro_target" : "/llamagen/c2i_f32"));
  LlamaGen target(tc, be);
  std::unique_ptr<AutoregressiveModel> draft;
  speculative::FeatureInputs features;
  if (kind == "eagle") {
    auto e =
        std::make_unique<EagleDrafterModel>(load_model_config(kFix + "/spec/tiny_eagle"), target);
    features = {e->feature(), e->prefix_token()};
    draft = std::move(e);
  } else {
    draft = std::make_unique<LlamaGen>(
        config(kFix + (micro ? "/spec/micro_draft" : "/spec/tiny_draft")), be);
  }
  SamplingOptions so;
  so.cfg_scale = 3.0f;
  so.top_k = 50;
  const SamplingParams p = to_sampling_params(so);
  constexpr int kBatch = 3, kImages = 9;  // three batches: their shapes come back
  std::optional<speculative::TreeSpec> tree;
  if (kind == "tree") tree = speculative::load_tree_spec("kary:2,2");
  speculative::ModelDrafter model_drafter(*draft, p, 3, kBatch, tree, features);
  speculative::JacobiDrafter jacobi(tc.gpt.vocab_size, p);
  const auto rule = speculative::make_exact_rule();
  speculative::LoopSettings loop;
  loop.rule = rule.get();
  loop.drafter = windows ? static_cast<speculative::Drafter*>(&jacobi) : &model_drafter;
  loop.draft_len = windows ? 5 : 3;
  if (configure) configure(loop);
  DecoderSettings d = settings(p, 6, where);
  Generated out;
  speculative::SpeculativeDecoder dec(target, kBatch, d, loop, out.stats);
  if (drive)
    drive(dec, out.stats);
  else
    out.images = generate_labels(dec, kImages, out.stats, tc.gpt.num_classes);
  return out;
}

}  // namespace

// The device loop's target pass and walk run as one graph per launch (issue 42, item 3: a graph
// for verification, as for the draft steps): its inputs, the verifier's buffers and their sizes
// key it, and each round's uploads go to the same buffers before it replays. With a backend that
// records a graph at its first round and replays those ops with the values they were captured
// with (as a GPU replays its kernels), whole images are the host loop's, for chains, trees (their
// mask's stride fixed, so that a tree's launch does not change as the cache grows), EAGLE's
// chains (the drafter reads the pass's hidden states, where the replay wrote them) and Jacobi's
// windows, and most rounds replay a graph: one shape is captured once. A draft model's chain runs
// its catch-up's forward in its own graph (ModelDrafter::draft_on_device), the images unchanged.
TEST(DeviceRounds, TargetPassesReplayTheirGraphs) {
  for (const std::string kind : {"chain", "tree", "eagle", "sjd"}) {
    SCOPED_TRACE(kind);
    const Generated host = whole_images(kind, cpu_backend(), DeviceLoop::Off);
    test::CountingBackend recording;
    recording.record_graphs = true;
    const Generated device = whole_images(kind, recording, DeviceLoop::On);
    expect_same(device, host);
    EXPECT_EQ(host.stats.replayed_verify_rounds, 0);
    EXPECT_EQ(device.stats.device_rounds, device.stats.forward_passes - 3);  // all but prefills
    // Every round ran as a graph (here captured, then replayed). Shapes change as images finish
    // and drafts shorten near the end, so a few are captured (the draft chains' included), not
    // one a round: the later batches' shapes were the first's (7 to 9 captures in 45 rounds).
    EXPECT_EQ(device.stats.replayed_verify_rounds, device.stats.device_rounds);
    EXPECT_LT(recording.captures, device.stats.device_rounds / 4);
    // A draft model's chains (EAGLE's too) ran as graphs as well: a plain draft model's from its
    // catch-up's forward on, the first round's uneven one included.
    if (kind == "chain" || kind == "eagle") {
      EXPECT_GT(device.stats.device_drafted_rounds, 30);
      EXPECT_EQ(device.stats.replayed_draft_rounds, device.stats.device_drafted_rounds);
    }
  }
}

// A draft model's chain rounds repeat on the device in bursts (issue 42, item 1;
// speculative/chain_commit.h): each round's commit appends the images' tokens to a history there
// and moves the next round's inputs (the catch-up's tokens, every position, cached length, token
// index, draw stream and round), so the next round is the same graphs again, and the host reads
// the burst back once. The images and statistics are the host loop's, for the exact rule, LANTERN
// and COOL-SD (its schedule reads the round's depth), sampled and greedy; under a backend that
// records graphs and replays them with the values they were captured with, a step of several
// rounds reads back once and never waits otherwise.
TEST(DeviceRounds, ChainRoundsRunInBursts) {
  struct Case {
    SpeculativeOptions spec;
    float temperature;
  };
  // The target drafting for itself: drafts accepted deep, so every draw of a chain counts.
  SpeculativeOptions itself = method("sd");
  itself.draft_model = kFix + "/llamagen/c2i_f32";
  // Three rounds of drafts, then the target alone: a burst never crosses the last drafting round.
  SpeculativeOptions capped = method("sd");
  capped.max_rounds = 3;
  const std::vector<Case> cases = {
      {method("sd"), 1.0f},
      {method("sd"), 0.0f},
      {method("lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}), 1.0f},
      {method("cool-sd", {{"cool.delta", 1.5}}), 1.0f},
      {itself, 1.0f},
      {capped, 1.0f},
      {method("sjd"), 1.0f},
      {method("sjd"), 0.0f},
      {method("gsd"), 1.0f},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec.method + " at temperature " + std::to_string(c.temperature));
    const Generated host = run(c.spec, DeviceLoop::Off, c.temperature);
    const Generated device = run(c.spec, DeviceLoop::On, c.temperature);
    expect_same(device, host);
    EXPECT_EQ(host.stats.burst_rounds, 0);
    // Six images of 16 tokens in two batches, chains of 3: bursts of up to 3 rounds (with three
    // drafting rounds, one burst of 2 a batch).
    EXPECT_GE(device.stats.burst_rounds,
              c.spec.max_rounds > 0 ? 4 : device.stats.device_rounds / 3);
  }

  // One step, one burst, one read back.
  const Generated host = whole_images("chain", cpu_backend(), DeviceLoop::Off);
  test::CountingBackend recording;
  recording.record_graphs = true;
  int bursts = 0;
  whole_images("chain", recording, DeviceLoop::On,
               [&](speculative::SpeculativeDecoder& dec, GenerateStats& stats) {
                 std::vector<int> ids;
                 for (int i = 0; i < 3; ++i)
                   ids.push_back(dec.add(Condition::label(i), static_cast<uint64_t>(i)));
                 ASSERT_TRUE(dec.step());  // the prefills
                 for (bool more = true; more;) {
                   const GenerateStats before = stats;
                   recording.downloads = recording.syncs = 0;
                   more = dec.step();
                   const int64_t rounds = stats.device_rounds - before.device_rounds;
                   if (stats.burst_rounds - before.burst_rounds == 0) continue;
                   ++bursts;
                   EXPECT_GT(rounds, 1);
                   EXPECT_EQ(stats.burst_rounds - before.burst_rounds, rounds);
                   EXPECT_EQ(recording.downloads, 1) << "a burst of " << rounds << " rounds";
                   EXPECT_EQ(recording.syncs, 0);
                 }
                 for (int i = 0; i < 3; ++i) EXPECT_EQ(dec.image(ids[i]).tokens, host.images[i]);
               });
  EXPECT_GE(bursts, 1);
}

// Jacobi windows (SJD; GSD on them) burst too: each round's commit refills every image's next
// window on the device (chain_commit.h, refill_jacobi_window) as JacobiDrafter::propose makes it,
// the draws of the rows past the rejection carried over with those rows as their q, the other
// positions fresh (uniform, one-hot q), and the burst's last round hands its carry-over to the
// drafter. The four-token target accepts its carried draws often, so windows hold fresh positions
// and carried ones, and some rounds accept the whole window. Under a backend that replays captured
// graphs with the values they were captured with, the images and statistics are the host loop's.
TEST(DeviceRounds, JacobiWindowsRunInBursts) {
  const Generated host = whole_images("micro-sjd", cpu_backend(), DeviceLoop::Off, {}, {}, 8);
  test::CountingBackend recording;
  recording.record_graphs = true;
  const Generated device = whole_images("micro-sjd", recording, DeviceLoop::On, {}, {}, 8);
  expect_same(device, host);
  EXPECT_GE(device.stats.burst_rounds, device.stats.device_rounds / 2);  // 63 of 91 here

  // Under --draft-len auto, held for spans of up to 5 rounds: the window's model learns from each
  // burst round's carried drafts and acceptance, as the host loop's rounds tell it.
  speculative::RoundCosts costs;
  costs.verify = {1.0, 1.1, 1.25, 1.45, 1.7};
  const speculative::DraftLengthPolicy policy(costs, 4, true);
  const auto held = [&](speculative::LoopSettings& loop) {
    loop.policy = &policy;
    loop.hold_depth = 5;
  };
  const Generated auto_host =
      whole_images("micro-sjd", cpu_backend(), DeviceLoop::Off, {}, held, 8);
  const Generated auto_device =
      whole_images("micro-sjd", cpu_backend(), DeviceLoop::On, {}, held, 8);
  expect_same(auto_device, auto_host);
  int depths = 0;
  for (const ImageStats& im : auto_host.stats.per_image) {
    int used = 0;
    for (size_t d = 1; d < im.rounds_by_depth.size(); ++d) used += im.rounds_by_depth[d] > 0;
    depths = std::max(depths, used);
  }
  EXPECT_GT(auto_device.stats.burst_rounds, 0);  // 34 of 105 here
  EXPECT_GE(depths, 2);                          // windows of 1, 2 and 3 drafts here
}

// --draft-len auto's rounds burst too: the policy's depth is held for spans of rounds
// (LoopSettings::hold_depth, DraftLengthPolicy::choose_held), a burst runs within every image's
// span at its depth (the three images of a batch may hold different ones: their chains are
// padded to the longest), and the policy observes each of its rounds afterwards, in order. With the
// host loop holding its depths for the same spans, the images and statistics are the host loop's.
// The four-token pair's drafts are accepted 70-85% of the time at each depth, where these costs (a
// near-flat target pass, a dear draft step) put the choice between 2 and 3 drafts, so the depths
// vary: a burst whose rounds the policy did not see, or a span miscounted, changes the later
// choices. Unset, the hold is the burst length on the device loop and 1 (a choice every round) on
// the host loop.
TEST(DeviceRounds, AutoRoundsHoldTheirDepthInBursts) {
  speculative::RoundCosts costs;
  costs.verify = {1.0, 1.05, 1.1, 1.15};
  costs.draft_step = 0.3;
  const speculative::DraftLengthPolicy policy(costs, 3);
  auto held = [&](int hold, const speculative::AcceptanceRule* rule = nullptr) {
    return [&policy, hold, rule](speculative::LoopSettings& loop) {
      loop.policy = &policy;
      loop.hold_depth = hold;
      if (rule) loop.rule = rule;
    };
  };
  // COOL-SD's schedule reads each round's cap (its L: the maximum depth, or the image's end), so a
  // burst must end while every round's cap is still the first's.
  const auto cool = speculative::make_cool_sd_rule(1.5f, -1.0f);
  for (const int hold : {3, 5, -5}) {
    const speculative::AcceptanceRule* rule = hold < 0 ? cool.get() : nullptr;
    SCOPED_TRACE("hold " + std::to_string(std::abs(hold)) + (rule ? ", cool-sd" : ""));
    const Generated host =
        whole_images("micro", cpu_backend(), DeviceLoop::Off, {}, held(std::abs(hold), rule), 8);
    const Generated device =
        whole_images("micro", cpu_backend(), DeviceLoop::On, {}, held(std::abs(hold), rule), 8);
    expect_same(device, host);
    // 28, 43 and 28 of about 100 rounds here: bursts of images holding different lengths too.
    EXPECT_GE(device.stats.burst_rounds, 15);
    int depths = 0;  // the policy's choices vary: an image's rounds drafted 1, 2 and 3 here
    for (const ImageStats& im : host.stats.per_image) {
      int used = 0;
      for (size_t d = 1; d < im.rounds_by_depth.size(); ++d) used += im.rounds_by_depth[d] > 0;
      depths = std::max(depths, used);
    }
    EXPECT_GE(depths, 2);
  }
  // Some bursts hold images of different lengths (chains padded to the longest): a step whose
  // burst added rounds of two depths. Three batches of three, as above.
  int mixed = 0;
  whole_images(
      "micro", cpu_backend(), DeviceLoop::On,
      [&](speculative::SpeculativeDecoder& dec, GenerateStats& stats) {
        for (int b = 0; b < 3; ++b) {
          std::vector<int> ids;
          for (int i = 3 * b; i < 3 * b + 3; ++i)
            ids.push_back(dec.add(Condition::label(i % 3), i));
          for (bool more = true; more;) {
            std::vector<std::vector<int64_t>> before;
            for (const int id : ids) before.push_back(dec.image(id).stats.rounds_by_depth);
            const int64_t bursts = stats.burst_rounds;
            more = dec.step();
            if (stats.burst_rounds == bursts) continue;
            std::set<size_t> depths;
            for (size_t i = 0; i < ids.size(); ++i) {
              const std::vector<int64_t>& now = dec.image(ids[i]).stats.rounds_by_depth;
              for (size_t d = 1; d < now.size(); ++d)
                if (now[d] > (d < before[i].size() ? before[i][d] : 0)) depths.insert(d);
            }
            mixed += depths.size() > 1;
          }
          for (const int id : ids) dec.remove(id);
        }
      },
      held(5), 8);
  EXPECT_GT(mixed, 0);
  // Unset: a choice every round on the host loop, held for a burst (32 rounds) on the device loop.
  const Generated every = whole_images("micro", cpu_backend(), DeviceLoop::Off, {}, held(1), 8);
  const Generated host = whole_images("micro", cpu_backend(), DeviceLoop::Off, {}, held(0), 8);
  expect_same(host, every);
  const Generated bursts = whole_images("micro", cpu_backend(), DeviceLoop::On, {}, held(0), 8);
  const Generated hold32 = whole_images("micro", cpu_backend(), DeviceLoop::Off, {}, held(32), 8);
  expect_same(bursts, hold32);
  EXPECT_GT(bursts.stats.burst_rounds, 0);
  // A choice every round on the device loop: no bursts (the depth may change each round).
  const Generated device = whole_images("micro", cpu_backend(), DeviceLoop::On, {}, held(1), 8);
  expect_same(device, every);
  EXPECT_EQ(device.stats.burst_rounds, 0);
}

namespace {

// Writes a NaN into the first logit of the `poison_at`-th forward output of `rows` x `width`.
class PoisonedBackend final : public test::CountingBackend {
 public:
  int64_t rows = 0, width = 0;
  int poison_at = -1, seen = 0;
  void linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    CountingBackend::linear(x, w, b, y);
    if (y.dim(0) == rows && y.dim(-1) == width && seen++ == poison_at) y.ptr<float>()[0] = NAN;
  }
};

}  // namespace

// A non-finite target row in a burst's first or second round (the first batch's passes 1 and 2:
// its first round after the prefill has one token an image, then a burst of 2 or 3) ends the run
// with the error, before any of the burst's tokens is committed on the host. On the CPU the
// distributions throw at the row; on a GPU the round's flag reaches the host through the commit
// (ChainCommit.AppendsTheTokensAndMovesTheFields, Backends/Verify.ChainCommitsAreTheCpus).
TEST(DeviceRounds, ABurstReportsANonFiniteRowOfAnyRound) {
  for (const int pass : {1, 2}) {
    SCOPED_TRACE("target pass " + std::to_string(pass));
    PoisonedBackend poisoned;
    poisoned.rows = 2 * 3 * 4;  // both halves of 3 images, root and 3 drafts
    poisoned.width = load_model_config(kFix + "/llamagen/c2i_f32").gpt.vocab_size;
    poisoned.poison_at = pass;
    int64_t bursts = 0;
    try {
      whole_images("chain", poisoned, DeviceLoop::On,
                   [&](speculative::SpeculativeDecoder& dec, GenerateStats& stats) {
                     for (int i = 0; i < 3; ++i) dec.add(Condition::label(i), i);
                     while (dec.step()) bursts = stats.burst_rounds;
                   });
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      // The CPU's distributions throw at the row (a GPU's set the flag the commit keeps).
      EXPECT_NE(std::string(e.what()).find("non-finite logits"), std::string::npos) << e.what();
    }
    EXPECT_EQ(bursts, 0) << "the burst returned before its error";
  }
}

// The commit (speculative/chain_commit.h) on two images, chains of 3: each image's accepted drafts
// (from its walk nodes) and next token appended to its history row at its count, which grows;
// then each field moved: by the tokens committed plus its constant, by a constant, or set to the
// history's token at n - 1 or n - 2. A round's flag is or-ed into the burst's, and once that is
// set nothing more is committed or moved, a later round's clear flag leaving it set.
TEST(ChainCommit, AppendsTheTokensAndMovesTheFields) {
  Backend& be = cpu_backend();
  constexpr int m = 2, width = 3, N = 12;
  std::vector<speculative::DraftVerdict> verdicts(m);
  verdicts[0].accepted = 2, verdicts[0].next_token = 70;
  verdicts[1].accepted = 0, verdicts[1].next_token = 80;
  std::vector<speculative::WalkNode> nodes(m * width);
  for (int i = 0; i < m * width; ++i) nodes[i].token = 10 + i;
  std::vector<int32_t> state = {4, 6}, history(m * N, -1), committed(m, 0);
  for (int j = 0; j < m; ++j)
    for (int t = 0; t < state[j]; ++t) history[j * N + t] = 100 * (j + 1) + t;
  std::vector<int32_t> words = {50, 60, 7, 0, 0, 3};
  std::vector<speculative::RoundField> fields = {
      {&words[0], 0, speculative::RoundField::kCommitted, 0, 0},
      {&words[1], 1, speculative::RoundField::kCommitted, -2, 0},
      {&words[2], 1, speculative::RoundField::kConstant, 4096, 0},
      {&words[3], 0, speculative::RoundField::kToken, -1, 0},
      {&words[4], 0, speculative::RoundField::kToken, -2, 0},
      {&words[5], 1, speculative::RoundField::kToken, -1, 0},
  };
  auto bytes = [](auto& v) {
    using T = typename std::remove_reference_t<decltype(v)>::value_type;
    return Tensor{DType::U8, Layout::RowMajor, {static_cast<int64_t>(v.size() * sizeof(T))},
                  v.data(),  nullptr,          nullptr};
  };
  auto ints = [](std::vector<int32_t>& v, Shape shape) {
    return Tensor{DType::I32, Layout::RowMajor, std::move(shape), v.data(), nullptr, nullptr};
  };
  Tensor s = ints(state, {m}), h = ints(history, {m, N}), c = ints(committed, {m});
  std::vector<int32_t> round_flag = {0}, burst_flag = {0};
  Tensor rf = ints(round_flag, {1}), bf = ints(burst_flag, {1});
  auto commit = [&] {
    speculative::commit_chain_round(be, bytes(verdicts), bytes(nodes), m, width, s, h, c,
                                    bytes(fields), static_cast<int>(fields.size()), rf, bf);
  };
  commit();
  EXPECT_EQ(committed, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(state, (std::vector<int32_t>{7, 7}));
  EXPECT_EQ(std::vector<int32_t>(history.begin() + 4, history.begin() + 7),
            (std::vector<int32_t>{10, 11, 70}));
  EXPECT_EQ(history[N + 6], 80);
  EXPECT_EQ(history[N + 7], -1);
  const std::vector<int32_t> moved = {53, 59, 7 + 4096, 70, 11, 80};
  EXPECT_EQ(words, moved);
  EXPECT_EQ(burst_flag[0], 0);
  const std::vector<int32_t> kept = history;
  for (const int32_t raised : {1, 0}) {
    SCOPED_TRACE("round flag " + std::to_string(raised));
    round_flag[0] = raised;
    commit();
    EXPECT_EQ(burst_flag[0], 1);
    EXPECT_EQ(committed, (std::vector<int32_t>{0, 0}));
    EXPECT_EQ(state, (std::vector<int32_t>{7, 7}));
    EXPECT_EQ(history, kept);
    EXPECT_EQ(words, moved);
  }
}

// A burst's commit with Jacobi windows (chain_commit.h, refill_jacobi_window): after each image's
// commit its next window is written to the window words, then kWindow fields copy them. Image 0
// (depth 4, its rows from 10) rejected at depth 2: its first 3 drafts are the carry-over draws of
// rows 2..4 with those rows (12..14) as q, its last a fresh position; image 1 (depth 3 of
// width 4) accepted its whole window: every position fresh, uniform over the vocabulary at its
// token index in the next round's JacobiInit stream, one-hot q, as JacobiDrafter::propose draws
// them. Each refill moves the round.
TEST(ChainCommit, RefillsJacobiWindows) {
  Backend& be = cpu_backend();
  constexpr int m = 2, width = 4, N = 20, V = 7;
  std::vector<speculative::DraftVerdict> verdicts(m);
  verdicts[0].accepted = 1, verdicts[0].rejected = 1, verdicts[0].next_token = 6;
  verdicts[1].accepted = 3, verdicts[1].rejected = 0, verdicts[1].next_token = 5;
  std::vector<speculative::WalkNode> nodes(m * width);
  for (int i = 0; i < m * width; ++i) nodes[i].token = i % V;
  std::vector<int32_t> state = {4, 6}, history(m * N, 0), committed(m, 0);
  std::vector<int32_t> carried = {1, 2, 3, 4, 5, 6, 0, 1};  // image j's row r at j * width + r - 1
  std::vector<speculative::WindowImage> images = {{11, 3, 7, 4, 10}, {11, 8, 2, 3, 5}};
  std::vector<int32_t> window(m * width * speculative::kWindowWords, -9);
  std::vector<int32_t> words(3, -1);
  std::vector<speculative::RoundField> fields = {
      {&words[0], 0, speculative::RoundField::kWindow, 3 * speculative::kWindowWords, 0},
      {&words[1], 1, speculative::RoundField::kWindow, 5 * speculative::kWindowWords, 0},
      {&words[2], 0, speculative::RoundField::kWindow,
       speculative::kWindowWords + speculative::kWindowRow, 0},
  };
  auto tensor = [](auto& v, DType dtype, Shape shape) {
    return Tensor{dtype, Layout::RowMajor, std::move(shape), v.data(), nullptr, nullptr};
  };
  auto bytes = [&](auto& v) {
    using T = typename std::remove_reference_t<decltype(v)>::value_type;
    return tensor(v, DType::U8, {static_cast<int64_t>(v.size() * sizeof(T))});
  };
  Tensor s = tensor(state, DType::I32, {m}), h = tensor(history, DType::I32, {m, N}),
         c = tensor(committed, DType::I32, {m});
  std::vector<int32_t> round_flag = {0}, burst_flag = {0};
  Tensor rf = tensor(round_flag, DType::I32, {1}), bf = tensor(burst_flag, DType::I32, {1});
  speculative::JacobiWindows w{tensor(carried, DType::I32, {m * width}), bytes(images),
                               tensor(window, DType::I32, {m * width * speculative::kWindowWords}),
                               V};
  speculative::commit_chain_round(be, bytes(verdicts), bytes(nodes), m, width, s, h, c,
                                  bytes(fields), static_cast<int>(fields.size()), rf, bf, &w);
  EXPECT_EQ(state, (std::vector<int32_t>{6, 10}));
  EXPECT_EQ(images[0].round, 8);
  EXPECT_EQ(images[1].round, 3);
  auto slot = [&](int j, int c) {
    const int32_t* p = window.data() + (j * width + c) * speculative::kWindowWords;
    return std::vector<int32_t>(p, p + speculative::kWindowWords);
  };
  auto fresh = [&](int j, int c) {
    const speculative::WindowImage& im = images[j];
    const double u =
        counter_uniform(im.seed, im.image, static_cast<uint32_t>(state[j] + c),
                        speculative::stream_id(speculative::Stream::JacobiInit, im.round));
    return std::vector<int32_t>{std::min(static_cast<int32_t>(u * V), V - 1),
                                speculative::WalkNode::kOneHot, 0};
  };
  // Image 0: rows 2, 3, 4 carried (their draws at 1, 2, 3), then one fresh position.
  EXPECT_EQ(slot(0, 0), (std::vector<int32_t>{2, 0, 12}));
  EXPECT_EQ(slot(0, 1), (std::vector<int32_t>{3, 0, 13}));
  EXPECT_EQ(slot(0, 2), (std::vector<int32_t>{4, 0, 14}));
  EXPECT_EQ(slot(0, 3), fresh(0, 3));
  // Image 1: three fresh positions, its padding slot untouched.
  std::set<int32_t> tokens;
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(slot(1, k), fresh(1, k));
    tokens.insert(slot(1, k)[0]);
  }
  EXPECT_GT(tokens.size(), 1u);  // three uniform draws over 7 tokens, not one token
  // The host drafter's fresh window for image 1 at its next round: the same tokens.
  speculative::JacobiDrafter jacobi(V, SamplingParams{});
  ImageState im;
  im.rng = CounterRng(images[1].seed, images[1].image);
  im.tokens.assign(static_cast<size_t>(state[1]), 0);
  im.round = images[1].round;
  ImageState* active[] = {&im};
  const int depth[] = {3};
  std::vector<speculative::DraftTree> trees;
  jacobi.propose(active, depth, trees);
  ASSERT_EQ(trees.at(0).size(), 3u);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(trees[0][k].token, slot(1, k)[0]) << k;
  EXPECT_EQ(slot(1, 3), std::vector<int32_t>(speculative::kWindowWords, -9));
  EXPECT_EQ(words, (std::vector<int32_t>{slot(0, 3)[0], slot(1, 1)[0], 13}));
}
