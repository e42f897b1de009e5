// The public streaming API (include/tessera/generation.h, issue 44): requests added, cancelled
// and collected between steps through a Pipeline. A request's image depends only on its
// condition, seed and image index: the same as Pipeline::generate's, alone or among others, added
// at the start or while others are decoded, for vanilla and speculative methods. Ids are reused
// once polled or cancelled, a cancelled request frees its slots at once, arrivals at every step
// do not starve the requests in flight, and a preview shows the tokens so far.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include "tessera/error.h"
#include "tessera/generation.h"

using namespace tessera;

namespace {

const std::string kFix = std::string(TESSERA_FIXTURES) + "/";

std::unique_ptr<Pipeline> c2i() {
  LoadOptions lo;
  lo.threads = 1;
  return Pipeline::load(kFix + "llamagen/c2i_f32", lo);
}

GenerateOptions options(const std::string& method, int batch) {
  GenerateOptions o;
  o.sampling.cfg_scale = 3.0f;
  o.sampling.temperature = 1.0f;
  o.sampling.top_k = 50;
  o.batch = batch;
  o.spec.method = method;
  if (method == "sd") {
    o.spec.draft_model = kFix + "spec/tiny_draft";
    o.spec.draft_len = 3;
  }
  if (method == "hawk") o.spec.draft_model = kFix + "spec/tiny_hawk";
  return o;
}

// The image Pipeline::generate makes for `cond` with `seed` at image index `index`.
// The image of one request generated alone, by the host loop (the reference for the device loop's
// generations too).
std::vector<int32_t> alone(Pipeline& pipe, GenerateOptions o, const Condition& cond, uint64_t seed,
                           uint64_t index) {
  o.device_loop = DeviceLoop::Off;
  o.seed = seed;
  o.first_image_index = index;
  o.batch = 1;
  return pipe.generate({cond}, o).at(0);
}

class GenerationApi : public ::testing::TestWithParam<std::string> {};

// Eight requests, each with its own seed and class: three at the start, the rest added one per
// step while the others are decoded (some while a prefill is waiting), at most four at once. Each
// must equal its image generated alone.
TEST_P(GenerationApi, EachRequestIsItsImageAlone) {
  auto pipe = c2i();
  const GenerateOptions o = options(GetParam(), 4);
  auto gen = pipe->start_generation(o);
  struct Req {
    GenerationRequest r;
    int id = -1;
    std::vector<int32_t> got = {};
  };
  std::vector<Req> reqs;
  for (int i = 0; i < 8; ++i)
    reqs.push_back({{Condition::label(i % 10), 1000 + 7 * static_cast<uint64_t>(i),
                     static_cast<uint64_t>(i % 3)}});
  size_t next = 0;
  std::map<int, size_t> by_id;
  auto add_one = [&] {
    reqs[next].id = gen->add(reqs[next].r);
    by_id[reqs[next].id] = next;
    ++next;
  };
  for (int i = 0; i < 3; ++i) add_one();
  int steps = 0;
  while (next < reqs.size() || gen->in_flight() > 0) {
    if (next < reqs.size() && gen->capacity() > 0) add_one();
    ASSERT_TRUE(gen->step());
    for (FinishedImage& f : gen->poll()) {
      Req& r = reqs[by_id.at(f.id)];
      r.got = std::move(f.tokens);
      by_id.erase(f.id);
    }
    ASSERT_LT(++steps, 2000);
  }
  EXPECT_FALSE(gen->step());
  for (const Req& r : reqs) {
    SCOPED_TRACE("seed " + std::to_string(r.r.seed));
    ASSERT_EQ(r.got.size(), 16u);
    EXPECT_EQ(r.got, alone(*pipe, o, r.r.condition, r.r.seed, r.r.image_index));
  }
  EXPECT_EQ(gen->stats().images, 8);
  EXPECT_EQ(gen->stats().tokens, 8 * 16);
}

INSTANTIATE_TEST_SUITE_P(Methods, GenerationApi, ::testing::Values("vanilla", "sd", "hawk"));

// A request is cancelled mid-way: its slots are free at once (capacity), it is never polled, its
// id is the next request's, and the others are unaffected.
TEST(GenerationApiLifecycle, CancelFreesSlotsAndIdsAreReused) {
  auto pipe = c2i();
  const GenerateOptions o = options("sd", 2);
  auto gen = pipe->start_generation(o);
  const GenerationRequest a{Condition::label(1), 5, 0}, b{Condition::label(2), 6, 0};
  const int ia = gen->add(a), ib = gen->add(b);
  EXPECT_EQ(ia, 0);
  EXPECT_EQ(ib, 1);
  EXPECT_EQ(gen->capacity(), 0);
  try {
    gen->add(a);
    FAIL() << "added beyond the batch";
  } catch (const ParameterError& e) {
    EXPECT_EQ(e.param(), "capacity");
  }
  for (int i = 0; i < 3; ++i) gen->step();
  const size_t partial = gen->tokens(ib).size();
  EXPECT_GT(partial, 0u);
  EXPECT_LT(partial, 16u);
  gen->cancel(ib);
  EXPECT_EQ(gen->capacity(), 1);
  EXPECT_THROW(gen->tokens(ib), ParameterError);
  EXPECT_THROW(gen->cancel(ib), ParameterError);
  const GenerationRequest c{Condition::label(3), 7, 0};
  EXPECT_EQ(gen->add(c), ib) << "the cancelled request's id is the lowest free one";
  std::map<int, std::vector<int32_t>> got;
  while (gen->step())
    for (FinishedImage& f : gen->poll()) got[f.id] = f.tokens;
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got.at(ia), alone(*pipe, o, a.condition, a.seed, 0));
  EXPECT_EQ(got.at(ib), alone(*pipe, o, c.condition, c.seed, 0));
  // Polled: both ids are free again.
  EXPECT_EQ(gen->capacity(), 2);
  EXPECT_EQ(gen->add(a), 0);
}

// A finished request keeps its id and its slot's place in the count until it is polled, and
// tokens() and preview() show it; a request in flight shows its tokens so far, grey beyond them.
TEST(GenerationApiLifecycle, FinishedUntilPolledAndPreviews) {
  auto pipe = c2i();
  auto gen = pipe->start_generation(options("vanilla", 2));
  const int id = gen->add({Condition::label(4), 9, 0});
  gen->step();  // the prefill: the first token
  gen->step();  // the second
  const std::vector<int32_t> two = gen->tokens(id);
  ASSERT_EQ(two.size(), 2u);
  const std::vector<uint8_t> px = gen->preview(id);
  const int S = pipe->image_size(), cell = S / 4;
  ASSERT_EQ(px.size(), static_cast<size_t>(S) * S * 3);
  auto at = [&](int y, int x) { return px[(static_cast<size_t>(y) * S + x) * 3]; };
  EXPECT_EQ(at(S - 1, S - 1), 128) << "the last cell is not generated yet";
  EXPECT_EQ(at(cell / 2, 2 * cell + cell / 2), 128) << "nor the third";
  // The first two cells are the decode of those tokens, as decoding the grid shows there.
  std::vector<int32_t> grid = two;
  grid.resize(16, 0);
  const std::vector<uint8_t> full = pipe->decode(grid, 1);
  for (int y = 0; y < cell; ++y)
    for (int x = 0; x < 2 * cell; ++x)
      ASSERT_EQ(at(y, x), full[(static_cast<size_t>(y) * S + x) * 3]) << y << "," << x;
  while (gen->in_flight() > 0) gen->step();
  const std::vector<int32_t> all = gen->tokens(id);
  EXPECT_EQ(all.size(), 16u);
  EXPECT_TRUE(std::equal(two.begin(), two.end(), all.begin()));
  EXPECT_EQ(gen->capacity(), 1) << "finished, not polled";
  const auto done = gen->poll();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].id, id);
  EXPECT_EQ(done[0].tokens, all);
  EXPECT_EQ(done[0].stats.tokens, 16);
  EXPECT_EQ(gen->capacity(), 2);
  EXPECT_THROW(gen->tokens(id), ParameterError);
}

// Requests arriving at every step: prefills alternate with rounds, so the first request keeps
// being decoded (a token every second step) instead of waiting for the arrivals to stop.
TEST(GenerationApiLifecycle, ArrivalsDoNotStarveRequestsInFlight) {
  auto pipe = c2i();
  auto gen = pipe->start_generation(options("vanilla", 8));
  const int first = gen->add({Condition::label(1), 1, 0});
  gen->step();  // its prefill
  std::vector<int> later;
  for (int i = 0; i < 7; ++i) {
    later.push_back(gen->add({Condition::label(2), 100 + static_cast<uint64_t>(i), 0}));
    gen->step();  // a round of the first (the arrival waits) ...
    gen->step();  // ... then the arrival's prefill
  }
  EXPECT_EQ(gen->tokens(first).size(), 1u + 7u) << "one token per round of the first";
  // Arrival i: its prefill's token, then one per round of the 6 - i iterations after it.
  for (size_t i = 0; i < later.size(); ++i)
    EXPECT_EQ(gen->tokens(later[i]).size(), 7u - i) << "arrival " << i;
}

TEST(GenerationApiLifecycle, BadOptionsAreRefusedAtTheStart) {
  auto pipe = c2i();
  GenerateOptions o = options("sd", 2);
  o.spec.method = "no-such-method";
  EXPECT_THROW(pipe->start_generation(o), ParameterError);
}

}  // namespace

// A Pipeline shared by threads (tools/serve runs a Generation per setting; the Python package
// will call it from several threads): each thread's images are the ones it gets alone, whatever
// the others run at the same time, among them methods that draft with other draft models and
// heads (the family keeps every drafter it loaded while runs hold it).
TEST(PipelineThreads, ThreadsSharingAPipelineGetTheImagesTheyGetAlone) {
  auto pipe = c2i();
  std::vector<GenerateOptions> runs = {options("vanilla", 2), options("sd", 2), options("hawk", 2)};
  GenerateOptions eagle = options("vanilla", 2);
  eagle.spec.method = "eagle";
  eagle.spec.draft_model = kFix + "spec/tiny_eagle";
  runs.push_back(eagle);
  GenerateOptions medusa = options("vanilla", 2);
  medusa.spec.method = "medusa";
  medusa.spec.draft_model = kFix + "spec/tiny_medusa";
  runs.push_back(medusa);
  const std::vector<Condition> conds = {Condition::label(1), Condition::label(2),
                                        Condition::label(3)};
  std::vector<std::vector<std::vector<int32_t>>> alone;
  for (const GenerateOptions& o : runs) alone.push_back(pipe->generate(conds, o));
  // A fresh pipeline, so that the threads also race to load the drafters.
  pipe = c2i();
  std::vector<std::vector<std::vector<int32_t>>> shared(runs.size());
  std::vector<std::string> errors(runs.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < runs.size(); ++k)
    threads.emplace_back([&, k] {
      try {
        for (int rep = 0; rep < 2; ++rep) shared[k] = pipe->generate(conds, runs[k]);
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
  for (std::thread& t : threads) t.join();
  for (size_t k = 0; k < runs.size(); ++k) {
    SCOPED_TRACE(runs[k].spec.method);
    EXPECT_EQ(errors[k], "");
    EXPECT_EQ(shared[k], alone[k]);
  }
}

// The emoji pair, whose trained draft is accepted whole in most rounds (so a running image's
// draft cache trails its tokens by two), with requests joining while others are decoded: a
// joining image feeds its draft one token and the others two in the same forward (the draft
// failed "draft cache behind" here once, and served images that depended on their batch). Each
// image is the one generated alone.
TEST(GenerationApiLifecycle, JoiningAWellDraftedBatchChangesNoImage) {
  LoadOptions lo;
  lo.threads = 1;
  const std::string emoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/";
  auto pipe = Pipeline::load(emoji + "target", lo);
  GenerateOptions o;
  o.batch = 4;
  o.spec.method = "sd";
  o.spec.draft_model = emoji + "draft";
  o.spec.draft_len = 4;
  auto gen = pipe->start_generation(o);
  std::map<int, std::pair<GenerationRequest, std::vector<int32_t>>> got;
  std::map<int, GenerationRequest> live;
  int added = 0, step = 0;
  while (added < 6 || gen->in_flight() > 0) {
    if (added < 6 && step % 3 == 0 && gen->capacity() > 0) {
      const GenerationRequest r{Condition::label(17 * added), static_cast<uint64_t>(40 + added), 0};
      live[gen->add(r)] = r;
      ++added;
    }
    ASSERT_TRUE(gen->step());
    ++step;
    for (FinishedImage& f : gen->poll()) {
      got[static_cast<int>(got.size())] = {live.at(f.id), std::move(f.tokens)};
      live.erase(f.id);
    }
  }
  ASSERT_EQ(got.size(), 6u);
  for (const auto& [k, g] : got) {
    SCOPED_TRACE("seed " + std::to_string(g.first.seed));
    EXPECT_EQ(g.second, alone(*pipe, o, g.first.condition, g.first.seed, 0));
  }
}

namespace {

// Each drafter's way of drafting: chains from a draft model, static and dynamic trees, EAGLE's
// features, Medusa's and Hawk's heads, Jacobi windows.
// A drafter by name; "-device": its rounds verified by the device loop (on the CPU backend here).
GenerateOptions drafting(std::string name) {
  const size_t device = name.find("-device");
  if (device != std::string::npos) {
    GenerateOptions o = drafting(name.substr(0, device));
    o.device_loop = DeviceLoop::On;
    return o;
  }
  GenerateOptions o = options(name == "sd-tree" || name == "sd-dynamic" ? "sd" : "vanilla", 4);
  if (name == "sd") o = options("sd", 4);
  if (name == "hawk") o = options("hawk", 4);
  if (name == "sd-tree") o.spec.tree = "kary:2,2";
  if (name == "sd-dynamic") o.spec.tree = "dynamic:3,2,4";
  if (name == "eagle" || name == "medusa" || name == "sjd") {
    o.spec.method = name;
    o.spec.draft_model = name == "sjd" ? "" : kFix + "spec/tiny_" + name;
  }
  return o;
}

class GenerationSampling : public ::testing::TestWithParam<std::string> {};

}  // namespace

// Requests with their own guidance scale, temperature, top-k and top-p share one generation's
// batch: each image is the one generated alone with its request's settings (every distribution
// of an image, the target's and its drafts', uses its own settings).
TEST_P(GenerationSampling, EachRequestSamplesWithItsOwnSettings) {
  auto pipe = c2i();
  const GenerateOptions o = drafting(GetParam());
  auto gen = pipe->start_generation(o);
  std::vector<SamplingOptions> settings(4, o.sampling);
  settings[1].temperature = 0.6f;
  settings[1].top_k = 7;
  settings[2].cfg_scale = 1.5f;
  settings[2].top_p = 0.8f;
  settings[3].temperature = 1.4f;
  settings[3].cfg_interval = 5.0f;
  std::map<int, size_t> by_id;
  for (size_t k = 0; k < settings.size(); ++k) {
    GenerationRequest r{Condition::label(3), 77, 0};
    if (k > 0) r.sampling = settings[k];
    by_id[gen->add(r)] = k;
  }
  std::vector<std::vector<int32_t>> got(settings.size());
  while (gen->step())
    for (FinishedImage& f : gen->poll()) got[by_id.at(f.id)] = std::move(f.tokens);
  std::set<std::vector<int32_t>> distinct;
  for (size_t k = 0; k < settings.size(); ++k) {
    SCOPED_TRACE("settings " + std::to_string(k));
    GenerateOptions alone_opts = o;
    alone_opts.sampling = settings[k];
    EXPECT_EQ(got[k], alone(*pipe, alone_opts, Condition::label(3), 77, 0));
    distinct.insert(got[k]);
  }
  EXPECT_GT(distinct.size(), 2u) << "the settings change the images";
}

INSTANTIATE_TEST_SUITE_P(Drafters, GenerationSampling,
                         ::testing::Values("vanilla", "sd", "sd-tree", "sd-dynamic", "eagle",
                                           "medusa", "hawk", "sjd", "sd-device", "sjd-device"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// Guidance on or off, and greedy or not, shape the batch (its unconditional slots, the drafters'
// trees): a request that differs there is refused, naming the setting.
TEST(GenerationApiLifecycle, GuidanceAndGreedinessAreTheGenerations) {
  auto pipe = c2i();
  auto gen = pipe->start_generation(options("sd", 2));
  GenerationRequest r{Condition::label(3), 1, 0};
  r.sampling = options("sd", 2).sampling;
  r.sampling->cfg_scale = 1.0f;
  try {
    gen->add(r);
    ADD_FAILURE() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_EQ(e.param(), "sampling");
    EXPECT_NE(std::string(e.what()).find("guidance"), std::string::npos) << e.what();
  }
  r.sampling = options("sd", 2).sampling;
  r.sampling->temperature = 0.0f;
  EXPECT_THROW(gen->add(r), ParameterError);
  r.sampling->temperature = -1.0f;  // out of range: named
  try {
    gen->add(r);
    ADD_FAILURE() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_EQ(e.param(), "temperature");
  }
  EXPECT_EQ(gen->in_flight(), 0);
  EXPECT_EQ(gen->capacity(), 2);
}

namespace {

// A request's method: the generation's draft options (`base`), another rule and its parameters.
SpeculativeOptions method_like(const GenerateOptions& base, const std::string& method,
                               MethodParams params = {}) {
  SpeculativeOptions s = base.spec;
  s.method = method;
  s.params = std::move(params);
  return s;
}

SpeculativeOptions vanilla_resampling(SpeculativeOptions s) {
  s.resample = "vanilla";  // [p - q]+ instead of the method's G*
  return s;
}

// The methods the drafter of `name` (drafting()) runs: its own and others that draft alike.
std::vector<SpeculativeOptions> methods_drafting_as(const std::string& name,
                                                    const GenerateOptions& o) {
  if (name == "sjd")  // Jacobi windows
    return {o.spec,
            method_like(o, "gsd", {{"gsd.g", int64_t{20}}, {"gsd.d", 100.0}, {"gsd.delta", 1.0}}),
            method_like(o, "lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}),
            method_like(o, "uniform-rsd", {{"rsd.delta", 20.0}})};
  if (name == "medusa")  // Medusa's heads: typical acceptance, and LANTERN on their tree
    return {o.spec, method_like(o, "medusa-typical"),
            method_like(o, "lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}),
            method_like(o, "cool-sd", {{"cool.delta", 2.0}})};
  if (name == "sd-device")  // the ratio rules: every round verified by the device loop
    return {o.spec,
            method_like(o, "cool-sd", {{"cool.delta", 2.0}}),
            vanilla_resampling(method_like(o, "cool-sd", {{"cool.delta", 1.5}})),
            method_like(o, "uniform-rsd", {{"rsd.delta", 1.5}}),
            method_like(o, "amplify", {{"amplify.k", 2.0}}),
            method_like(o, "addition", {{"addition.eps", 0.05}})};
  if (name == "sd-greedy")  // the rules' own greedy acceptance and filtering (LANTERN's code)
    return {
        o.spec, method_like(o, "lantern", {{"lantern.k", int64_t{200}}, {"lantern.delta", 1.0}}),
        method_like(
            o, "lantern",
            {{"lantern.k", int64_t{200}}, {"lantern.delta", 1.0}, {"lantern.reference", true}})};
  return {o.spec,
          method_like(o, "lantern", {{"lantern.k", int64_t{5}}, {"lantern.delta", 0.4}}),
          method_like(o, "lantern", {{"lantern.k", int64_t{3}}, {"lantern.delta", 0.2}}),
          method_like(o, "cool-sd", {{"cool.delta", 2.0}}),
          method_like(o, "uniform-rsd", {{"rsd.delta", 1.5}}),
          method_like(o, "amplify", {{"amplify.k", 2.0}})};
}

class GenerationMethods : public ::testing::TestWithParam<std::string> {};

}  // namespace

// Requests with other methods and parameters that draft as the generation's method does (a draft
// model's chains or trees, Medusa's heads, Jacobi windows) share its forwards, each image verified
// by its own rule: each is the image its method makes alone, the rules make different images,
// and the batch took one target forward per round of its longest image.
TEST_P(GenerationMethods, EachRequestVerifiesWithItsOwnMethod) {
  auto pipe = c2i();
  GenerateOptions o = drafting(GetParam() == "sd-greedy" ? "sd" : GetParam());
  const bool device = o.device_loop == DeviceLoop::On;
  if (GetParam() == "sd-greedy") {  // filters that matter: LANTERN's code verifies unfiltered
    o.sampling.temperature = 0.0f;
    o.sampling.top_k = 2;
  }
  const std::vector<SpeculativeOptions> methods = methods_drafting_as(GetParam(), o);
  constexpr int kSeeds = 3;  // requests per method: (class, seed) 4+s, 31+s
  o.batch = static_cast<int>(methods.size()) * kSeeds;
  auto gen = pipe->start_generation(o);
  std::map<int, std::pair<size_t, int>> by_id;  // -> (method, seed)
  for (int seed = 0; seed < kSeeds; ++seed)
    for (size_t k = 0; k < methods.size(); ++k) {
      GenerationRequest r{Condition::label(4 + seed), 31 + static_cast<uint64_t>(seed), 0};
      if (k > 0) r.method = methods[k];
      ASSERT_TRUE(gen->joins(r)) << methods[k].method;
      by_id[gen->add(r)] = {k, seed};
    }
  std::map<std::pair<size_t, int>, std::vector<int32_t>> got;
  int64_t rounds = 0;
  while (gen->step())
    for (FinishedImage& f : gen->poll()) {
      rounds = std::max(rounds, f.stats.rounds);
      got[by_id.at(f.id)] = std::move(f.tokens);
    }
  EXPECT_EQ(gen->stats().forward_passes, 1 + rounds) << "one prefill, then shared rounds";
  EXPECT_EQ(gen->stats().device_rounds, device ? rounds : 0);
  for (size_t k = 0; k < methods.size(); ++k) {
    SCOPED_TRACE(methods[k].method + " " + std::to_string(k));
    GenerateOptions own = o;
    own.spec = methods[k];
    int differs = 0;  // from the generation's own method's image of that request
    for (int seed = 0; seed < kSeeds; ++seed) {
      const std::vector<int32_t>& image = got[{k, seed}];
      EXPECT_EQ(image, alone(*pipe, own, Condition::label(4 + seed), 31 + seed, 0));
      differs += image != got[{0, seed}];
    }
    if (k > 0) {
      EXPECT_GT(differs, 0) << "its rule changes its images";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Drafters, GenerationMethods,
                         ::testing::Values("sd", "sd-greedy", "sd-tree", "medusa", "sjd",
                                           "sd-device"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// --draft-len auto: a request giving the costs the generation chooses by (those it calibrated)
// drafts alike and joins; other costs do not ("other auto_costs"), nor does a request without
// costs beside a generation given some (it would calibrate its own).
TEST(GenerationApiLifecycle, AutoDraftLengthsJoinOnTheSameCosts) {
  auto pipe = c2i();
  GenerateOptions o = options("sd", 2);
  o.spec.draft_len = kDraftLenAuto;
  o.spec.max_auto_len = 3;
  auto gen = pipe->start_generation(o);
  const DraftCosts calibrated = gen->stats().draft_costs;
  ASSERT_FALSE(calibrated.verify.empty());
  SpeculativeOptions s = o.spec;
  s.auto_costs = calibrated;
  EXPECT_TRUE(gen->joins({Condition::label(1), 1, 0, std::nullopt, s}));
  s.auto_costs.draft_step *= 2;
  EXPECT_FALSE(gen->joins({Condition::label(1), 1, 0, std::nullopt, s}));
  o.spec.auto_costs = calibrated;
  auto given = pipe->start_generation(o);
  EXPECT_TRUE(given->joins({Condition::label(1), 1, 0, std::nullopt, o.spec}));
  SpeculativeOptions none = o.spec;
  none.auto_costs = {};
  EXPECT_FALSE(given->joins({Condition::label(1), 1, 0, std::nullopt, none}));
}

// A method that drafts otherwise (another draft length, drafter or tree; vanilla beside a
// speculative method and the reverse) does not join: joins() says so and add() refuses it naming
// "method"; a method the model refuses is refused as Pipeline::generate refuses it; a lossy
// method that joins brings its note.
TEST(GenerationApiLifecycle, MethodsThatDraftOtherwiseDoNotJoin) {
  auto pipe = c2i();
  const GenerateOptions o = options("sd", 2);
  auto gen = pipe->start_generation(o);
  // (what differs, the options, what the error says of it)
  std::vector<std::tuple<std::string, SpeculativeOptions, std::string>> others;
  SpeculativeOptions s = o.spec;
  s.draft_len = 2;
  others.push_back({"a shorter draft", s, "a draft length of 2, not 3"});
  s = o.spec;
  s.tree = "kary:2,2";
  others.push_back({"a tree", s, "the tree kary:2,2, not chains"});
  s = o.spec;
  s.draft_len = kDraftLenAuto;
  others.push_back({"auto", s, "a draft length of auto (up to"});
  s = {};
  s.method = "sjd";
  others.push_back({"Jacobi", s, "Jacobi windows, not the draft model"});
  s = {};
  others.push_back({"vanilla", s, "no drafts, not the draft model"});
  s = o.spec;
  s.method = "medusa";
  s.draft_model = kFix + "spec/tiny_medusa";
  others.push_back({"heads", s, "Medusa heads"});
  s = o.spec;
  s.max_rounds = 2;
  others.push_back({"max_rounds", s, "max_rounds 2, not 0"});
  for (const auto& [what, spec, says] : others) {
    SCOPED_TRACE(what);
    const GenerationRequest r{Condition::label(1), 1, 0, std::nullopt, spec};
    EXPECT_FALSE(gen->joins(r));
    try {
      gen->add(r);
      ADD_FAILURE() << "no error";
    } catch (const ParameterError& e) {
      EXPECT_EQ(e.param(), "method");
      for (const std::string& want : {says, std::string("a generation of its own")})
        EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
  s = o.spec;
  s.method = "lantern";
  s.params["lantern.k"] = int64_t{0};
  GenerationRequest bad{Condition::label(1), 1, 0, std::nullopt, s};
  try {
    gen->joins(bad);
    ADD_FAILURE() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_EQ(e.param(), "lantern.k");
  }
  bad.method->method = "no-such-method";
  EXPECT_THROW(gen->add(bad), ParameterError);
  EXPECT_EQ(gen->in_flight(), 0);
  EXPECT_EQ(gen->capacity(), 2);
  // A lossy method joins with its note; the sampling shape still has to match.
  EXPECT_TRUE(gen->stats().notes.empty());
  GenerationRequest lantern{Condition::label(1), 1, 0, std::nullopt, method_like(o, "lantern")};
  EXPECT_TRUE(gen->joins(lantern));
  ASSERT_EQ(gen->stats().notes.size(), 1u);
  EXPECT_NE(gen->stats().notes[0].find("lantern is lossy"), std::string::npos);
  lantern.sampling = o.sampling;
  lantern.sampling->cfg_scale = 1.0f;
  EXPECT_FALSE(gen->joins(lantern));
  // A vanilla generation takes vanilla requests only.
  auto plain = pipe->start_generation(options("vanilla", 2));
  EXPECT_TRUE(plain->joins({Condition::label(1), 1, 0, std::nullopt, SpeculativeOptions{}}));
  EXPECT_FALSE(plain->joins({Condition::label(1), 1, 0, std::nullopt, o.spec}));
}
