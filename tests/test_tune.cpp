// `tessera tune` and the validated settings it records (docs/quality.md): the Pareto front and the
// tolerance as pure functions, the config.json "quality" section (round trip, strict errors), the
// model's validated settings as defaults and the note outside them, and one sweep end to end.
#include "cli_harness.h"

#include <nlohmann/json.hpp>

#include "speculative/model_defaults.h"
#include "tessera/config.h"
#include "tessera/tuning.h"

using namespace tessera;

namespace {

const std::string kEmoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji";

TEST(TuneSelection, ParetoFront) {
  // (speed-up, top-1): b dominates a; c and b trade speed for quality; d equals c (neither
  // dominates the other); e is dominated by c.
  const std::vector<TunePoint> p = {
      {1.0, 0.80, 0}, {1.2, 0.85, 0}, {1.5, 0.70, 0}, {1.5, 0.70, 0}, {1.4, 0.60, 0}};
  EXPECT_EQ(pareto_front(p), (std::vector<bool>{false, true, true, true, false}));
  EXPECT_TRUE(pareto_front(std::vector<TunePoint>{}).empty());
  const std::vector<TunePoint> one = {{0.5, 0.1, 0}};
  EXPECT_EQ(pareto_front(one), std::vector<bool>{true});
}

// Ties on one axis (top-1 is a multiple of 1/n, so equal top-1 is common): of two equally accurate
// points the slower is dominated, of two equally fast ones the less accurate; two equal points
// dominate neither.
TEST(TuneSelection, ParetoFrontWithTies) {
  const std::vector<TunePoint> p = {{1.2, 0.75, 0},  {1.4, 0.75, 0},  {1.6, 0.5, 0},
                                    {1.6, 0.625, 0}, {1.0, 0.875, 0}, {1.0, 0.875, 0}};
  EXPECT_EQ(pareto_front(p), (std::vector<bool>{false, true, false, true, true, true}));
}

TEST(TuneSelection, ToleranceAndFastestWithin) {
  const QualityTolerance t;  // 2 points, 10% over the floor
  // vanilla top-1 0.86, noise floor 40: within needs top-1 >= 0.84 and FD <= 44.
  EXPECT_TRUE(within_tolerance({1.1, 0.84, 44.0}, 0.86, 40.0, t));  // both at the bound
  EXPECT_FALSE(within_tolerance({1.1, 0.8399, 10.0}, 0.86, 40.0, t));
  EXPECT_FALSE(within_tolerance({1.1, 0.90, 44.01}, 0.86, 40.0, t));
  const std::vector<TunePoint> p = {
      {1.3, 0.70, 30}, {1.2, 0.85, 41}, {1.1, 0.86, 39}, {1.25, 0.86, 50}};
  EXPECT_EQ(fastest_within_tolerance(p, 0.86, 40.0, t), 1);
  QualityTolerance strict;
  strict.top1_drop_points = 0;
  strict.frechet_over_floor = 0;
  EXPECT_EQ(fastest_within_tolerance(p, 0.86, 40.0, strict), 2);
  EXPECT_EQ(fastest_within_tolerance(p, 0.95, 40.0, t), -1);  // none: --write refuses
  // A floor below 0 is rounding (vanilla's images the same on other seeds, as greedy): the bound
  // is 0, met by a point with vanilla's images (the same rounding) and by nothing further away.
  EXPECT_TRUE(within_tolerance({1.1, 0.86, -3e-13}, 0.86, -3e-13, t));
  EXPECT_TRUE(within_tolerance({1.1, 0.86, 0.0}, 0.86, -3e-13, t));
  EXPECT_FALSE(within_tolerance({1.1, 0.86, 1e-9}, 0.86, -3e-13, t));
}

ValidatedSetting sample_setting() {
  ValidatedSetting s;
  s.params = {{"lantern.delta", 0.05}, {"lantern.k", int64_t{30}}, {"draft_len", int64_t{4}}};
  s.draft_model = true;
  QualityMeasurement& m = s.measured;
  m.images = 64;
  m.speedup = 1.12;
  m.mean_accepted_length = 2.5;
  m.top1 = {0.84, 0.75, 0.92};
  m.frechet = {40.5, 35.0, 46.0};
  m.vanilla_top1 = {0.86, 0.78, 0.94};
  m.frechet_floor = {39.0, 34.0, 44.0};
  m.date = "2026-11-25";
  m.tessera_version = "0.1.0";
  return s;
}

TEST(QualityConfig, RoundTripKeepsOtherKeys) {
  // The shipped config without its own quality section (the test adds one).
  nlohmann::ordered_json shipped =
      nlohmann::ordered_json::parse(slurp(kEmoji + "/target/config.json"));
  shipped.erase("quality");
  const std::string original = shipped.dump(2);
  const std::string text =
      with_validated_setting(original, kEmoji + "/target", "lantern", sample_setting());
  const ModelConfig c = parse_model_config(text, "m");
  ASSERT_TRUE(c.quality.present);
  EXPECT_DOUBLE_EQ(c.quality.tolerance.top1_drop_points, 2.0);  // the default, written out
  ASSERT_EQ(c.quality.methods.count("lantern"), 1u);
  const ValidatedSetting& s = c.quality.methods.at("lantern");
  EXPECT_EQ(std::get<int64_t>(s.params.at("lantern.k")), 30);
  EXPECT_DOUBLE_EQ(std::get<double>(s.params.at("lantern.delta")), 0.05);
  EXPECT_EQ(std::get<int64_t>(s.params.at("draft_len")), 4);
  EXPECT_TRUE(s.draft_model);
  EXPECT_EQ(s.measured.images, 64);
  EXPECT_NEAR(s.measured.top1.lo, 0.75, 1e-6);
  EXPECT_EQ(s.measured.date, "2026-11-25");
  // Every other key is kept, in its order: the file is the original plus the section.
  const auto a = nlohmann::ordered_json::parse(original), b = nlohmann::ordered_json::parse(text);
  nlohmann::ordered_json stripped = b;
  stripped.erase("quality");
  EXPECT_EQ(stripped.dump(), a.dump());
  // A second method is added beside the first; the tolerance already there is kept.
  const std::string twice = with_validated_setting(text, "m", "cool-sd", sample_setting());
  EXPECT_EQ(parse_model_config(twice, "m").quality.methods.size(), 2u);
  // Writing a method again replaces its entry.
  EXPECT_EQ(parse_model_config(with_validated_setting(twice, "m", "lantern", sample_setting()), "m")
                .quality.methods.size(),
            2u);
  // Without the section: no quality, today's defaults.
  EXPECT_FALSE(parse_model_config(original, "m").quality.present);
}

// Issue 39: a setting replaced by tune --write is kept, newest first, in the method's history.
TEST(QualityConfig, ReplacedSettingsGoToTheHistory) {
  nlohmann::ordered_json shipped =
      nlohmann::ordered_json::parse(slurp(kEmoji + "/target/config.json"));
  shipped.erase("quality");
  ValidatedSetting first = sample_setting(), second = sample_setting(), third = sample_setting();
  first.params["lantern.k"] = int64_t{10};
  second.params["lantern.k"] = int64_t{20};
  third.params["lantern.k"] = int64_t{40};
  std::string text = with_validated_setting(shipped.dump(2), "m", "lantern", first);
  EXPECT_TRUE(parse_model_config(text, "m").quality.methods.at("lantern").history.empty());
  text = with_validated_setting(text, "m", "lantern", second);
  text = with_validated_setting(text, "m", "lantern", third);
  const ValidatedSetting s = parse_model_config(text, "m").quality.methods.at("lantern");
  EXPECT_EQ(std::get<int64_t>(s.params.at("lantern.k")), 40);
  ASSERT_EQ(s.history.size(), 2u);
  EXPECT_EQ(std::get<int64_t>(s.history[0].params.at("lantern.k")), 20);  // newest first
  EXPECT_EQ(std::get<int64_t>(s.history[1].params.at("lantern.k")), 10);
  EXPECT_EQ(s.history[1].measured.images, 64);
  EXPECT_TRUE(s.history[0].history.empty());
  // A history entry is a setting without a history of its own.
  auto j = nlohmann::json::parse(text);
  j["quality"]["methods"]["lantern"]["history"][0]["history"] = nlohmann::json::array();
  try {
    parse_model_config(j.dump(), "m");
    ADD_FAILURE() << "nested history accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("history[0]"), std::string::npos) << e.what();
  }
}

TEST(TuneSelection, IntervalsMustResolveTheTolerance) {
  const QualityTolerance t;  // 2 points of top-1, 10% of the floor
  // -n 4: top-1 [25, 100]% around 50% reaches 50 points: (50 / 2)^2 = 625 times the images.
  const ToleranceResolution wide =
      tolerance_resolution({0.5, 0.25, 1.0}, {40, 35, 45}, 4, 100.0, t);
  EXPECT_FALSE(wide.resolved);
  EXPECT_NEAR(wide.top1_reach, 0.5, 1e-12);
  EXPECT_NEAR(wide.top1_allowed, 0.02, 1e-12);
  EXPECT_EQ(wide.images_needed, 2500);
  // The Frechet interval can be the one that needs more: reach 20 against 10% of 50 = 5.
  const ToleranceResolution fd = tolerance_resolution({0.8, 0.79, 0.81}, {50, 30, 70}, 64, 50.0, t);
  EXPECT_FALSE(fd.resolved);
  EXPECT_EQ(fd.images_needed, 64 * 16);
  const ToleranceResolution ok =
      tolerance_resolution({0.8, 0.785, 0.815}, {50, 46, 54}, 1600, 50.0, t);
  EXPECT_TRUE(ok.resolved);
  EXPECT_EQ(ok.images_needed, 1600);
  QualityTolerance zero;
  zero.top1_drop_points = 0;
  EXPECT_FALSE(tolerance_resolution({0.8, 0.79, 0.81}, {50, 49, 51}, 64, 50.0, zero).resolved);
}

TEST(QualityConfig, StrictErrors) {
  auto base = nlohmann::json::parse(slurp(kEmoji + "/target/config.json"));
  base["quality"] = nlohmann::json::parse(nlohmann::json::parse(with_validated_setting(
      base.dump(), "m", "lantern", sample_setting()))["quality"]
                                              .dump());
  auto expect_bad = [&](const std::function<void(nlohmann::json&)>& edit,
                        const std::string& words) {
    nlohmann::json j = base;
    edit(j);
    try {
      parse_model_config(j.dump(), "m");
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  expect_bad([](auto& j) { j["quality"]["tolerance"]["top1_drop"] = 2; },
             "unknown key \"top1_drop\"");
  expect_bad([](auto& j) { j["quality"]["tolerance"]["top1_drop_points"] = -1; },
             "\"top1_drop_points\" must be in [0, 100]");
  expect_bad([](auto& j) { j["quality"]["tolerance"]["frechet_over_floor"] = "10%"; },
             "wrong type");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["drafts"] = "both"; },
             "\"drafts\" must be model or jacobi");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["params"]["draft_len"] = 0; },
             "\"draft_len\" must be in [1,");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["params"]["Lantern K"] = 3; },
             "is not a parameter name");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["measured"]["top1"]["lo"] = 0.9; },
             "needs lo <= value <= hi");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["measured"]["top1"]["value"] = 1.5; },
             "\"value\" must be in [0, 1]");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["measured"]["date"] = "25.11.2026"; },
             "must be YYYY-MM-DD");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["measured"].erase("images"); },
             "missing key \"images\"");
  expect_bad([](auto& j) { j["quality"]["methods"]["lantern"]["extra"] = 1; },
             "unknown key \"extra\"");
  expect_bad([](auto& j) { j["quality"] = 3; }, "expected a JSON object");
}

TEST(QualityConfig, RegistryChecksTheSettings) {
  QualitySection q;
  q.methods["lantern"] = sample_setting();
  EXPECT_NO_THROW(speculative::check_validated_settings(q, "cfg"));
  auto expect_bad = [](const QualitySection& s, const std::string& words) {
    try {
      speculative::check_validated_settings(s, "cfg");
      ADD_FAILURE() << "accepted: " << words;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  QualitySection bad = q;
  bad.methods["lantern"].params["cool.delta"] = 1.1;
  expect_bad(bad, "\"cool.delta\" is not a parameter of lantern");
  bad = q;
  bad.methods["lantern"].params["lantern.delta"] = 1.5;  // (0, 1]
  expect_bad(bad, "lantern.delta");
  bad = q;
  bad.methods["lantern"].params["lantern.k"] = std::string("many");
  expect_bad(bad, "must be an integer");
  bad = q;
  bad.methods["sd"] = sample_setting();
  expect_bad(bad, "sd is lossless");
  bad = QualitySection{};
  bad.methods["no-such"] = sample_setting();
  expect_bad(bad, "not a LlamaGen method");
}

TEST(QualityConfig, DefaultsAndNote) {
  QualitySection q;
  q.methods["lantern"] = sample_setting();
  SpeculativeOptions o;
  o.method = "lantern";
  o.draft_model = "draft";
  // The validated values fill what is not given; a given value wins.
  o.params["lantern.delta"] = 0.2;
  const SpeculativeOptions d = speculative::with_model_defaults(o, q);
  EXPECT_DOUBLE_EQ(std::get<double>(d.params.at("lantern.delta")), 0.2);
  EXPECT_EQ(std::get<int64_t>(d.params.at("lantern.k")), 30);
  EXPECT_EQ(d.draft_len, 4);
  EXPECT_FALSE(d.params.count("draft_len"));
  // Jacobi drafts were not validated: the draft-model length does not apply to them.
  SpeculativeOptions j = o;
  j.draft_model.clear();
  EXPECT_EQ(speculative::with_model_defaults(j, q).draft_len, 0);

  const std::string note = speculative::validated_settings_note(o, q, "M");
  EXPECT_NE(note.find("lantern.delta=0.2 (validated 0.05)"), std::string::npos) << note;
  EXPECT_NE(note.find("top-1 within 2 points"), std::string::npos) << note;
  EXPECT_EQ(note.find('\n'), std::string::npos);  // one line
  SpeculativeOptions inside = o;
  inside.params = {{"lantern.delta", 0.05}, {"cool.delta", 3.0}};  // another method's: ignored
  inside.draft_len = 4;
  EXPECT_EQ(speculative::validated_settings_note(inside, q, "M"), "");
  EXPECT_NE(speculative::validated_settings_note(j, q, "M").find("Jacobi drafts"),
            std::string::npos);
  // A setting recorded without a draft length was measured at --draft-len auto: a fixed length
  // is outside it, auto is not.
  QualitySection qa = q;
  qa.methods["lantern"].params.erase("draft_len");
  SpeculativeOptions fixed = inside;
  EXPECT_NE(
      speculative::validated_settings_note(fixed, qa, "M").find("draft_len=4 (validated auto)"),
      std::string::npos);
  fixed.draft_len = kDraftLenAuto;
  EXPECT_EQ(speculative::validated_settings_note(fixed, qa, "M"), "");
  SpeculativeOptions cool;
  cool.method = "cool-sd";
  EXPECT_NE(speculative::validated_settings_note(cool, q, "M").find("no validated setting for M"),
            std::string::npos);
  SpeculativeOptions sd;
  sd.method = "sd";
  sd.params["lantern.delta"] = 0.9;
  EXPECT_EQ(speculative::validated_settings_note(sd, q, "M"), "");  // lossless: never
  EXPECT_EQ(speculative::validated_settings_note(SpeculativeOptions{}, q, "M"), "");
}

class TuneCli : public CliTest {
 protected:
  // The shipped emoji target in tmp("target") (weights linked; config.json for the test to
  // write), with the classifier and draft its config names (../classifier, ../draft) beside it.
  fs::path emoji_target_copy() const {
    const fs::path model = tmp("target");
    fs::create_directories(model);
    for (const char* f : {"gpt.safetensors", "vq.safetensors", "classes.json"})
      fs::create_symlink(fs::path(kEmoji) / "target" / f, model / f);
    fs::create_directory_symlink(fs::path(kEmoji) / "classifier", tmp("classifier"));
    fs::create_directory_symlink(fs::path(kEmoji) / "draft", tmp("draft"));
    return model;
  }
};

TEST_F(TuneCli, NoteOnGenerate) {
  // The shipped emoji target has a validated cool-sd setting (δ 1.3, measured with its
  // distilled draft model, docs/methods.md): a δ outside it gets the note, the default does not.
  const CliResult outside =
      run({"generate", "-m", kEmoji + "/target", "--draft", kEmoji + "/draft", "--class", "3", "-n",
           "1", "--method", "cool-sd", "--cool-delta", "2", "-o", tmp("a.png")});
  ASSERT_EQ(outside.code, 0) << outside.err;
  EXPECT_NE(outside.err.find("note: cool-sd runs outside"), std::string::npos) << outside.err;
  EXPECT_NE(outside.err.find("cool.delta"), std::string::npos) << outside.err;
  const CliResult inside =
      run({"generate", "-m", kEmoji + "/target", "--draft", kEmoji + "/draft", "--class", "3", "-n",
           "1", "--method", "cool-sd", "-o", tmp("a.png")});
  ASSERT_EQ(inside.code, 0) << inside.err;
  EXPECT_EQ(inside.err.find("validated"), std::string::npos) << inside.err;
  const CliResult jacobi = run({"generate", "-m", kEmoji + "/target", "--class", "3", "-n", "1",
                                "--method", "amplify", "--draft", "none", "-o", tmp("c.png")});
  ASSERT_EQ(jacobi.code, 0) << jacobi.err;
  EXPECT_NE(jacobi.err.find("Jacobi drafts (validated with a draft model)"), std::string::npos)
      << jacobi.err;
  const CliResult exact = run({"generate", "-m", kEmoji + "/target", "--class", "3", "-n", "1",
                               "--method", "sjd", "-o", tmp("b.png")});
  ASSERT_EQ(exact.code, 0) << exact.err;
  EXPECT_EQ(exact.err.find("validated"), std::string::npos) << exact.err;
}

TEST_F(TuneCli, BadInput) {
  expect_error({"tune", "-m", kEmoji + "/target", "--method", "sd"}, {"sd is lossless"});
  expect_error({"tune", "-m", kEmoji + "/target", "--method", "lantern", "--grid", "lantern.q=1"},
               {"--grid", "no parameter 'lantern.q'"});
  expect_error(
      {"tune", "-m", kEmoji + "/target", "--method", "lantern", "--grid", "lantern.delta=2"},
      {"--grid", "lantern.delta"});
  expect_error({"tune", "-m", kEmoji + "/target", "--method", "lantern", "--grid",
                "lantern.delta=0.1", "--lantern-delta", "0.2"},
               {"--grid sweeps lantern.delta"});
  expect_error({"tune", "-m", kEmoji + "/target", "--method", "lantern", "--cool-delta", "2"},
               {"--cool-delta", "lantern does not use it"});
}

// A sweep end to end on a copy of the emoji target, greedy (temperature 0) with Jacobi drafts and
// 2 images per point, so that which points are within the tolerance is known in advance: LANTERN
// at delta 1e-9 accepts only the target's argmax (vanilla's images exactly, so vanilla's top-1
// and an FD equal to the floor's, vanilla on other seeds being the same images under greedy
// decoding); at delta 1 over 1000 latent neighbours it accepts random Jacobi drafts (other images,
// an FD far above the floor). The tolerance admits no top-1 drop and at most twice the floor.
// --points 3 of a 4-point grid; the fastest point within the tolerance is the one reported
// (EndToEndWrite records one). Not under ASan (.ci/run).
TEST_F(TuneCli, EndToEndSweep) {
  const fs::path model = emoji_target_copy();
  auto cfg = nlohmann::ordered_json::parse(slurp(kEmoji + "/target/config.json"));
  cfg["quality"] = {{"tolerance", {{"top1_drop_points", 0}, {"frechet_over_floor", 1}}}};
  spit(model / "config.json", cfg.dump(2));
  const CliResult r = run({"tune",
                           "-m",
                           model.string(),
                           "--method",
                           "lantern",
                           "--lantern-k",
                           "1000",
                           "--temperature",
                           "0",
                           "--grid",
                           "lantern.delta=1e-9,1;draft_len=3,7",
                           "--points",
                           "3",
                           "-n",
                           "2",
                           "-b",
                           "2",
                           "--per-class",
                           "1",
                           "-o",
                           "json",
                           "--draft",
                           "none",
                           "--plot",
                           tmp("front.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["images_per_point"], 2);
  // 3 of the grid's 4 points, spread evenly: the first, the second and the last.
  const auto& pts = j["points"];
  ASSERT_EQ(pts.size(), 3u);
  const std::vector<std::pair<double, int>> params = {{1e-9, 3}, {1e-9, 7}, {1.0, 7}};
  for (size_t i = 0; i < pts.size(); ++i) {
    EXPECT_DOUBLE_EQ(pts[i]["params"]["lantern.delta"].get<double>(), params[i].first) << i;
    EXPECT_EQ(pts[i]["params"]["draft_len"].get<int>(), params[i].second) << i;
  }
  // The tolerance, from the reported values: the first two points within, the last not.
  const double vanilla_top1 = j["vanilla_both_seed_sets"]["quality"]["top1"]["value"];
  const double floor = j["vanilla_other_seeds"]["quality"]["frechet_vs_vanilla"]["value"];
  const double vanilla_s = j["vanilla"]["seconds_per_image"];
  std::vector<bool> within;
  for (const auto& p : pts) {
    const double top1 = p["quality"]["top1"]["value"],
                 fd = p["quality"]["frechet_vs_vanilla"]["value"];
    within.push_back(top1 >= vanilla_top1 - 1e-12 && fd <= 2 * std::max(floor, 0.0) * (1 + 1e-12));
    EXPECT_EQ(p["within_tolerance"].get<bool>(), within.back()) << p;
    // The speed-up is vanilla's time per image over the point's.
    const double s = p["seconds_per_image"];
    EXPECT_NEAR(p["speedup_vs_vanilla"].get<double>(), vanilla_s / s, 1e-9 * vanilla_s / s) << p;
  }
  ASSERT_EQ(within, (std::vector<bool>{true, true, false}))
      << "the sweep's premise: delta 1e-9 keeps vanilla's images, delta 1 does not";
  // The Pareto front of (speed-up, top-1): not dominated by another point.
  for (size_t i = 0; i < pts.size(); ++i) {
    bool dominated = false;
    for (size_t k = 0; k < pts.size(); ++k) {
      const double si = pts[i]["speedup_vs_vanilla"], sk = pts[k]["speedup_vs_vanilla"];
      const double ti = pts[i]["quality"]["top1"]["value"], tk = pts[k]["quality"]["top1"]["value"];
      dominated = dominated || (sk >= si && tk >= ti && (sk > si || tk > ti));
    }
    EXPECT_EQ(pts[i]["pareto"].get<bool>(), !dominated) << i;
  }
  // The fastest point within the tolerance (the lower time per image of the first two) is the
  // one reported and the one written.
  const int best =
      pts[0]["seconds_per_image"].get<double>() <= pts[1]["seconds_per_image"].get<double>() ? 0
                                                                                             : 1;
  EXPECT_EQ(j["fastest_within_tolerance"].get<int>(), best);
  EXPECT_TRUE(fs::is_regular_file(tmp("front.png")));
}

TEST_F(TuneCli, EndToEndWrite) {
  const fs::path model = emoji_target_copy();
  auto cfg = nlohmann::ordered_json::parse(slurp(kEmoji + "/target/config.json"));
  // The shipped validated settings stay (amplify's is replaced below and goes to its history).
  cfg["quality"]["tolerance"] = {{"top1_drop_points", 100}, {"frechet_over_floor", 100}};
  spit(model / "config.json", cfg.dump(2));
  // The draft and the classifier are the ones its config.json names (../draft, ../classifier).
  const CliResult r = run({"tune", "-m", model.string(), "--method", "amplify", "--grid",
                           "amplify.k=1.5,3;draft_len=3", "-n", "2", "-b", "2", "-o", "json",
                           "--write", "--plot", tmp("front.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["points"].size(), 2u);
  EXPECT_EQ(j["images_per_point"], 2);
  EXPECT_EQ(j["draft"], tmp("draft"));
  EXPECT_EQ(j["classifier"], tmp("classifier"));
  EXPECT_NE(r.err.find("drafter=model " + tmp("draft") + " (named in "), std::string::npos)
      << r.err;
  for (const auto& p : j["points"]) {
    EXPECT_GT(p["speedup_vs_vanilla"].get<double>(), 0.0);
    EXPECT_TRUE(p["within_tolerance"].get<bool>());
    EXPECT_FALSE(p["quality"]["frechet_vs_vanilla"].is_null());
  }
  const int best = j["fastest_within_tolerance"].get<int>();
  EXPECT_TRUE(j["points"][best]["pareto"].get<bool>());
  EXPECT_TRUE(fs::is_regular_file(tmp("front.png")));
  const ModelConfig c = load_model_config(model.string());
  ASSERT_EQ(c.quality.methods.count("amplify"), 1u);
  const ValidatedSetting& s = c.quality.methods.at("amplify");
  EXPECT_DOUBLE_EQ(std::get<double>(s.params.at("amplify.k")),
                   j["points"][best]["params"]["amplify.k"].get<double>());
  EXPECT_EQ(std::get<int64_t>(s.params.at("draft_len")), 3);
  EXPECT_EQ(s.measured.images, 2);
  ASSERT_EQ(s.history.size(), 1u);  // the shipped setting it replaced
  EXPECT_DOUBLE_EQ(std::get<double>(s.history[0].params.at("amplify.k")), 1.25);
  EXPECT_EQ(s.history[0].measured.images, 64);
  EXPECT_NE(r.err.find("the previous one is kept"), std::string::npos) << r.err;
  EXPECT_DOUBLE_EQ(c.quality.tolerance.top1_drop_points, 100);  // kept
  EXPECT_EQ(c.gpt.dim, 384);                                    // the rest kept

  const CliResult inside =
      run({"generate", "-m", model.string(), "--draft", kEmoji + "/draft", "--class", "3", "-n",
           "1", "--method", "amplify", "-o", tmp("c.png")});
  ASSERT_EQ(inside.code, 0) << inside.err;
  EXPECT_EQ(inside.err.find("note: amplify"), std::string::npos) << inside.err;
  // The image records the validated value it ran with, so --from-png does not depend on the
  // model's config.json staying the same.
  const std::string k_text = param_value_text(s.params.at("amplify.k"), /*exact=*/true);
  EXPECT_NE(png_text(tmp("c.png"), "parameters").find("amplify.k=" + k_text + ";"),
            std::string::npos)
      << png_text(tmp("c.png"), "parameters");
  const CliResult outside = run({"generate", "-m", model.string(), "--draft", kEmoji + "/draft",
                                 "--class", "3", "-n", "1", "--method", "amplify", "--draft-len",
                                 "2", "-o", tmp("d.png"), "--stats-out", tmp("d.json")});
  ASSERT_EQ(outside.code, 0) << outside.err;
  EXPECT_NE(outside.err.find("draft_len=2 (validated 3)"), std::string::npos) << outside.err;
  // The note is in --stats-out too.
  const auto notes = nlohmann::json::parse(slurp(tmp("d.json")))["notes"];
  ASSERT_EQ(notes.size(), 1u) << notes;
  EXPECT_NE(notes[0].get<std::string>().find("draft_len=2 (validated 3)"), std::string::npos);

  // At the default tolerance (2 points of top-1), 2 images cannot resolve it: refused, the file
  // untouched, and the message says how many images would.
  cfg = nlohmann::ordered_json::parse(slurp(model / "config.json"));
  cfg["quality"]["tolerance"] = {{"top1_drop_points", 2}, {"frechet_over_floor", 0.1}};
  spit(model / "config.json", cfg.dump(2));
  const std::string before = slurp(model / "config.json");
  const CliResult refused =
      run({"tune", "-m", model.string(), "--method", "amplify", "--grid",
           "amplify.k=1.5;draft_len=3", "-n", "2", "-b", "2", "-q", "--write"});
  EXPECT_EQ(refused.code, 1) << refused.err;
  EXPECT_NE(refused.err.find("--write: at -n 2 the intervals cannot resolve the tolerance"),
            std::string::npos)
      << refused.err;
  EXPECT_NE(refused.err.find("images per point (-n "), std::string::npos) << refused.err;
  EXPECT_EQ(slurp(model / "config.json"), before);
}

}  // namespace
