// What a new user meets first (issue 39): a model directory that names its companions (the draft,
// the classifier), so `-m DIR` runs what the default model runs; --help showing the defaults that
// apply (the model's validated settings); every flag checked before any work; prompts as typed;
// images written as they finish; --from-png on every format it writes; the small things.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <sstream>
#include <thread>

#include "cli_harness.h"
#include "tessera/config.h"
#include "tessera/error.h"
#include "tessera/image_io.h"
#include "tessera/tessera.h"

using namespace tessera;

namespace {

const fs::path kEmojiDir = fs::path(TESSERA_SOURCE_DIR) / "models" / "emoji";
const std::string kTarget = (kEmojiDir / "target").string();

class CliReadme : public CliTest {
 protected:
  // The line a run starts with ("run: model=...; ..."), or "".
  static std::string run_line(const std::string& err) {
    const size_t at = err.find("run: ");
    return at == std::string::npos ? "" : err.substr(at, err.find('\n', at) - at);
  }
  // A copy of the fixture model whose config.json names `companions`.
  fs::path fixture_with_companions(const nlohmann::json& companions) const {
    const fs::path dir = copy_model("c2i_f32");
    edit_config(dir, [&](nlohmann::json& j) { j["companions"] = companions; });
    return dir;
  }
};

// ---- item 2: a model directory names its companions ---------------------------------------------

TEST(ModelCompanions, ParsedResolvedAndChecked) {
  const std::string base = R"({"gpt": {"model_type": "c2i", "dim": 8, "n_layer": 1, "n_head": 2,
      "ffn_dim": 8, "vocab_size": 4, "num_classes": 2, "image_size": 4, "downsample": 2})";
  const ModelConfig none = parse_model_config(base + "}", "/m/target");
  EXPECT_TRUE(none.companions.draft.empty());
  EXPECT_EQ(none.companion_path(none.companions.draft), "");
  const ModelConfig mc = parse_model_config(
      base +
          R"(, "companions": {"draft": "../draft", "eagle": "../eagle", "classifier": "../classifier"}})",
      "/m/target");
  EXPECT_EQ(mc.companions.draft, "../draft");
  EXPECT_EQ(mc.companion_path(mc.companions.eagle), "/m/eagle");
  EXPECT_EQ(mc.companion_path(mc.companions.draft), "/m/draft");
  EXPECT_EQ(mc.companion_path(mc.companions.classifier), "/m/classifier");
  auto refused = [&](const std::string& companions, const std::string& needle) {
    SCOPED_TRACE(companions);
    try {
      parse_model_config(base + ", \"companions\": " + companions + "}", "/m/target");
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("companions"), std::string::npos) << e.what();
    }
  };
  refused(R"({"draft": "/abs/draft"})", "relative");
  refused(R"({"draft": ""})", "relative");
  refused(R"({"draft": 3})", "wrong type");
  refused(R"({"head": "../head"})", "unknown key \"head\"");
  refused(R"(["../draft"])", "object");
}

// The shipped target names its draft: -m models/emoji/target runs exactly what the default does,
// and the first line says which drafter runs and why.
TEST_F(CliReadme, ModelDirectoryRunsWhatTheDefaultRuns) {
  const std::vector<std::string> common = {"--class", "3", "--method",    "lantern",
                                           "-s",      "4", "--draft-len", "4",
                                           "-t",      "1", "--tokens-out"};
  std::vector<std::string> by_default = {"generate"}, by_dir = {"generate", "-m", kTarget};
  for (auto* v : {&by_default, &by_dir}) v->insert(v->end(), common.begin(), common.end());
  by_default.push_back(tmp("a.npy"));
  by_dir.push_back(tmp("b.npy"));
  const CliResult a = run(by_default), b = run(by_dir);
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_TRUE(slurp(tmp("a.npy")) == slurp(tmp("b.npy")));
  EXPECT_EQ(run_line(a.err), run_line(b.err));
  EXPECT_NE(run_line(b.err).find("drafter=model (named in " + kTarget + "/config.json)"),
            std::string::npos)
      << b.err;
  EXPECT_EQ(b.err.find("Jacobi drafts"), std::string::npos) << b.err;  // its validated drafter
  // sd, which needs a draft model, runs with -m too.
  const CliResult sd = run({"generate", "-m", kTarget, "--class", "3", "--method", "sd",
                            "--draft-len", "4", "-t", "1", "--tokens-out", tmp("c.npy")});
  ASSERT_EQ(sd.code, 0) << sd.err;
  EXPECT_NE(sd.err.find("drafter=model"), std::string::npos) << sd.err;
}

// The shipped target names its EAGLE drafter: --method eagle drafts with it, says so, stores it,
// and --from-png repeats the run byte for byte.
TEST_F(CliReadme, EagleRunsTheNamedEagleDrafter) {
  const CliResult e = run({"generate", "-m", kTarget, "--class", "3", "--method", "eagle",
                           "--draft-len", "4", "-t", "1", "-o", tmp("e.png")});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(run_line(e.err).find("draft=emoji/eagle;"), std::string::npos) << e.err;
  EXPECT_NE(run_line(e.err).find("the EAGLE drafter named in"), std::string::npos) << e.err;
  const CliResult again = run({"generate", "--from-png", tmp("e.png"), "-o", tmp("f.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(slurp(tmp("e.png")) == slurp(tmp("f.png")));
}

// The shipped target names its Medusa heads: --method medusa drafts with them and says so.
TEST_F(CliReadme, MedusaRunsTheNamedMedusaHeads) {
  const CliResult e = run({"generate", "-m", kTarget, "--class", "3", "--method", "medusa", "-t",
                           "1", "-o", tmp("m.png")});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(run_line(e.err).find("draft=emoji/medusa;"), std::string::npos) << e.err;
  EXPECT_NE(run_line(e.err).find("the Medusa heads named in"), std::string::npos) << e.err;
  // --draft-len auto's costs, measured here (the test cache), are stored with the image.
  EXPECT_NE(png_text(tmp("m.png"), "parameters").find("draft_len=auto; draft_costs=0:"),
            std::string::npos);
  const CliResult again = run({"generate", "--from-png", tmp("m.png"), "-o", tmp("n.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(slurp(tmp("m.png")) == slurp(tmp("n.png")));
}

// --draft-len auto chooses each round's length from the costs it is given, else from this
// machine's (MedusaRunsTheNamedMedusaHeads); every image stores those it used, so --from-png
// repeats the lengths, hence the image, on a machine whose costs differ: here a fresh cache that
// would be calibrated anew and other threads (the cache's key), which the replay must not even
// calibrate.
TEST_F(CliReadme, StoredDraftCostsRepeatTheLengthsOnAnyMachine) {
  const std::string flat = "0:0.001,0.001,0.001,0.001,0.001", steep = "0:0.001,0.01,0.1,1,10";
  auto depth = [&](const std::string& stats) {
    return nlohmann::json::parse(slurp(tmp(stats))).at("mean_draft_depth").get<double>();
  };
  for (const auto& [costs, name] : {std::pair{flat, "flat"}, std::pair{steep, "steep"}}) {
    const std::string png = tmp(std::string(name) + ".png");
    const CliResult r =
        run({"generate", "-m", kTarget, "--class", "3", "--method", "medusa", "-t", "1",
             "--draft-costs", costs, "-o", png, "--stats-out", tmp(std::string(name) + ".json")});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(png_text(png, "parameters").find("draft_len=auto; draft_costs=" + costs + "; "),
              std::string::npos)
        << png_text(png, "parameters");
    if (std::string(name) == "steep") continue;  // one replay shows it (each run costs seconds)
    const fs::path cache = tmp_ / (std::string(name) + "-cache");
    const CliResult again = run({"generate", "--from-png", png, "-t", "2", "-o", tmp("again.png"),
                                 "--stats-out", tmp("again.json")},
                                "XDG_CACHE_HOME=" + shell_quote(cache.string()));
    ASSERT_EQ(again.code, 0) << again.err;
    EXPECT_TRUE(slurp(png) == slurp(tmp("again.png"))) << name;
    EXPECT_EQ(depth("again.json"), depth(std::string(name) + ".json")) << name;
    EXPECT_FALSE(fs::exists(cache)) << "the replay calibrated its own costs";
  }
  // The costs decide: verification as cheap at 5 positions as at 1 drafts all 4 heads each round,
  // a steep one drafts 1.
  EXPECT_GT(depth("flat.json"), 3.9);
  EXPECT_LT(depth("steep.json"), 1.1);
}

// --draft-len auto holds a chosen length for spans of rounds where a draft model's chains run in
// bursts on the device loop (32 rounds at most; here --device-loop on, on the CPU), else it
// chooses every round (a hold of 1). Every image stores the hold it used, so --from-png repeats its
// lengths, hence its image, on the other loop (the CPU's default host loop); and the hold decides:
// a replay held for 1 round draws other tokens.
TEST_F(CliReadme, StoredDraftHoldRepeatsTheLengthsOnEitherLoop) {
  std::string costs = "0.0003:";  // verification 8% dearer a position: lengths 1 to 16 pay
  for (int k = 0; k < 17; ++k) {
    if (k > 0) costs += ',';
    costs += std::to_string(0.001 * (1 + 0.08 * k));
  }
  const std::string png = tmp("held.png");
  const CliResult r = run({"generate", "-m", kTarget, "--class", "3", "--method", "sd", "-t", "1",
                           "--device-loop", "on", "--draft-costs", costs, "-o", png, "--tokens-out",
                           tmp("held.npy"), "--stats-out", tmp("held.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(png_text(png, "parameters").find("; draft_hold=32; "), std::string::npos)
      << png_text(png, "parameters");
  const nlohmann::json stats = nlohmann::json::parse(slurp(tmp("held.json")));
  EXPECT_EQ(stats.at("draft_hold").get<int>(), 32);
  EXPECT_GT(stats.at("burst_rounds").get<int>(), 0);
  const CliResult again = run({"generate", "--from-png", png, "-o", tmp("again.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(slurp(png) == slurp(tmp("again.png")));
  const CliResult one = run({"generate", "--from-png", png, "--draft-hold", "1", "-o",
                             tmp("one.png"), "--tokens-out", tmp("one.npy")});
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_NE(png_text(tmp("one.png"), "parameters").find("; draft_hold=1; "), std::string::npos);
  EXPECT_FALSE(slurp(tmp("held.npy")) == slurp(tmp("one.npy")));
  // An image stored before the hold was (its costs, no draft_hold) chose every round: so does its
  // replay, on the device loop too.
  int w = 0, h = 0;
  std::vector<std::pair<std::string, std::string>> text;
  const std::vector<uint8_t> rgb = read_png(tmp("one.png"), w, h, &text);
  for (auto& [k, v] : text)
    if (k == "parameters") v.erase(v.find("draft_hold=1; "), 14);
  write_png(tmp("old.png"), rgb.data(), w, h, text);
  EXPECT_EQ(png_text(tmp("old.png"), "parameters").find("draft_hold"), std::string::npos);
  const CliResult old = run({"generate", "--from-png", tmp("old.png"), "--device-loop", "on", "-o",
                             tmp("old-again.png"), "--tokens-out", tmp("old.npy")});
  ASSERT_EQ(old.code, 0) << old.err;
  EXPECT_TRUE(slurp(tmp("one.npy")) == slurp(tmp("old.npy")));
  // A fixed --draft-len over the stored auto: the costs and the hold auto chose by go with it.
  const CliResult fixed =
      run({"generate", "--from-png", png, "--draft-len", "4", "-o", tmp("fixed.png")});
  ASSERT_EQ(fixed.code, 0) << fixed.err;
  const std::string params = png_text(tmp("fixed.png"), "parameters");
  EXPECT_NE(params.find("draft_len=4; "), std::string::npos) << params;
  EXPECT_EQ(params.find("draft_costs"), std::string::npos) << params;
  EXPECT_EQ(params.find("draft_hold"), std::string::npos) << params;
}

// sjd's windows burst on the device loop too (chain_commit.h's refill): its image, stored with the
// hold the device loop used, repeats byte for byte on the host loop.
TEST_F(CliReadme, JacobiBurstsRepeatOnTheHostLoop) {
  // Jacobi drafts cost no draft step; verification 5% dearer a position, windows up to 32.
  std::string costs = "0:";
  for (int k = 0; k < 32; ++k) {
    if (k > 0) costs += ',';
    costs += std::to_string(0.001 * (1 + 0.05 * k));
  }
  const std::string png = tmp("sjd.png");
  const CliResult r =
      run({"generate", "-m", kTarget, "--class", "5", "--method", "sjd", "-t", "1", "--device-loop",
           "on", "--draft-costs", costs, "-o", png, "--stats-out", tmp("sjd.json")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(png_text(png, "parameters").find("; draft_hold=32; "), std::string::npos)
      << png_text(png, "parameters");
  const nlohmann::json stats = nlohmann::json::parse(slurp(tmp("sjd.json")));
  EXPECT_GT(stats.at("burst_rounds").get<int>(), 0);
  const CliResult again =
      run({"generate", "--from-png", png, "--device-loop", "off", "-o", tmp("sjd-again.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(slurp(png) == slurp(tmp("sjd-again.png")));
}

TEST_F(CliReadme, DraftFlagOverridesTheNamedDraft) {
  // --draft none: Jacobi drafts, said so, stored so that --from-png repeats them.
  const CliResult j = run({"generate", "-m", kTarget, "--class", "3", "--method", "lantern",
                           "--draft", "none", "--draft-len", "4", "-t", "1", "-o", tmp("j.png")});
  ASSERT_EQ(j.code, 0) << j.err;
  EXPECT_NE(run_line(j.err).find("drafter=jacobi (--draft none"), std::string::npos) << j.err;
  EXPECT_NE(png_text(tmp("j.png"), "parameters").find("draft=none;"), std::string::npos);
  const CliResult again = run({"generate", "--from-png", tmp("j.png"), "-o", tmp("k.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(slurp(tmp("j.png")) == slurp(tmp("k.png")));  // byte for byte
  // --draft DIR: that model.
  const CliResult d = run({"generate", "-m", kTarget, "--class", "3", "--method", "sd", "--draft",
                           (kEmojiDir / "draft-data").string(), "--draft-len", "2", "-t", "1",
                           "--tokens-out", tmp("d.npy")});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_NE(run_line(d.err).find("draft-data"), std::string::npos) << d.err;
  EXPECT_NE(run_line(d.err).find("drafter=model (--draft)"), std::string::npos) << d.err;
  // Refused before any work.
  expect_error({"generate", "-m", kTarget, "--class", "3", "--method", "sd", "--draft", "none",
                "--tokens-out", tmp("e.npy")},
               {"--draft none", "sd needs a draft model"});
  expect_error({"generate", "-m", kTarget, "--class", "3", "--method", "sd", "--draft",
                tmp("missing"), "--tokens-out", tmp("e.npy")},
               {"--draft", "no such directory"});
  expect_error({"generate", "-m", kTarget, "--class", "3", "--method", "sjd", "--draft",
                (kEmojiDir / "draft").string(), "--tokens-out", tmp("e.npy")},
               {"--draft", "sjd drafts by Jacobi iteration"});
  EXPECT_FALSE(fs::exists(tmp("e.npy")));
}

TEST_F(CliReadme, NamedDraftOfAnotherModel) {
  // A fixture that names a copy of itself as its draft (same vocabulary).
  const fs::path dir = fixture_with_companions({{"draft", "../c2i_draft"}});
  const std::vector<std::string> args = {"generate", "-m",           dir.string(), "--class",
                                         "3",        "--method",     "sd",         "-t",
                                         "1",        "--tokens-out", tmp("t.npy")};
  expect_error(args,
               {dir.string() + "/config.json names the draft ../c2i_draft", "no such directory"});
  fs::copy(kFixtures / "c2i_f32", tmp("c2i_draft"), fs::copy_options::recursive);
  const CliResult r = run(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(run_line(r.err).find("drafter=model (named in " + dir.string() + "/config.json)"),
            std::string::npos)
      << r.err;
  // A model that names none: sd needs --draft; lantern drafts by Jacobi iteration, and says why.
  expect_error({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--method", "sd",
                "--tokens-out", tmp("u.npy")},
               {"sd needs a draft model", "--draft DIR", "names none"});
  const CliResult l = run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--method",
                           "lantern", "-t", "1", "--tokens-out", tmp("l.npy")});
  ASSERT_EQ(l.code, 0) << l.err;
  EXPECT_NE(run_line(l.err).find("drafter=jacobi (no --draft given and "), std::string::npos)
      << l.err;
}

TEST_F(CliReadme, BenchUsesTheNamedDraft) {
  const CliResult r = run({"bench", "-m", kTarget, "--methods", "sd", "-n", "1", "--draft-lens",
                           "2", "-o", "json", "--quality", "off", "-q", "-t", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["draft"], (kEmojiDir / "draft").string());
  // bench --methods sd on a model that names no draft fails before the vanilla baseline.
  const CliResult none =
      run({"bench", "-m", fixture("c2i_f32"), "--methods", "sd", "-n", "1", "-t", "1"});
  EXPECT_EQ(none.code, 1);
  EXPECT_NE(none.err.find("needs a draft model"), std::string::npos) << none.err;
  EXPECT_EQ(none.err.find("bench: vanilla"), std::string::npos) << none.err;
}

// ---- item 3: --help shows the defaults that apply --------------------------------------------

TEST_F(CliReadme, HelpShowsTheModelsValidatedSettings) {
  for (const std::string cmd : {"generate", "bench", "tune"}) {
    SCOPED_TRACE(cmd);
    const CliResult d = run({cmd, "--help"});
    ASSERT_EQ(d.code, 0) << d.err;
    // The shipped target's validated cool-sd, gsd and lantern settings (its config.json).
    EXPECT_NE(d.out.find("default 1.3 (the model's validated setting; 1.1 without one)"),
              std::string::npos)
        << d.out;
    EXPECT_NE(d.out.find("default 3 (the model's validated setting; 10 (14 with --gsd-reference) "
                         "without one)"),
              std::string::npos)
        << d.out;
    EXPECT_NE(d.out.find("default 0.2 (the model's validated setting; 0.1 without one)"),
              std::string::npos)
        << d.out;
    EXPECT_NE(d.out.find("default: ../draft, named in the model's config.json"), std::string::npos)
        << d.out;
    // A model without validated settings or a draft: the methods' own defaults.
    const CliResult f = run({cmd, "-m", fixture("c2i_f32"), "--help"});
    ASSERT_EQ(f.code, 0) << f.err;
    EXPECT_EQ(f.out.find("validated setting"), std::string::npos) << f.out;
    EXPECT_NE(f.out.find("COOL-SD relaxation budget δ (cool-sd; > 0; default 1.1)"),
              std::string::npos)
        << f.out;
  }
}

// ---- item 7: prompts as a user types them ----------------------------------------------------

TEST_F(CliReadme, PromptsAsTyped) {
  // Unquoted words are one prompt.
  const CliResult words =
      run({"generate", "red", "apple", "-t", "1", "--tokens-out", tmp("a.npy")});
  ASSERT_EQ(words.code, 0) << words.err;
  EXPECT_NE(words.err.find("prompt 'red apple' -> class"), std::string::npos) << words.err;
  // The emoji itself, with or without U+FE0F.
  const CliResult emoji = run({"generate", "🍎", "-t", "1", "--tokens-out", tmp("b.npy")});
  ASSERT_EQ(emoji.code, 0) << emoji.err;
  EXPECT_NE(emoji.err.find(": red apple (twitter) (matched by emoji)"), std::string::npos)
      << emoji.err;
  EXPECT_TRUE(slurp(tmp("a.npy")) == slurp(tmp("b.npy")));
  expect_error({"generate", "🚀", "--tokens-out", tmp("c.npy")},
               {"'🚀' is not one of this model's emoji", "tessera classes"});
  expect_error({"generate", "red", "apple", "-p", "green apple", "--tokens-out", tmp("c.npy")},
               {"give the prompt once"});
  // classes: words that start names, and the emoji.
  const CliResult straw = run({"classes", "straw"});
  ASSERT_EQ(straw.code, 0) << straw.err;
  EXPECT_NE(straw.out.find("strawberry"), std::string::npos) << straw.out;
  const CliResult apple = run({"classes", "🍎"});
  ASSERT_EQ(apple.code, 0) << apple.err;
  EXPECT_EQ(std::count(apple.out.begin(), apple.out.end(), '\n'), 3) << apple.out;  // 3 styles
  EXPECT_NE(apple.out.find("red apple"), std::string::npos) << apple.out;
  const CliResult two = run({"classes", "red", "apple", "--style", "google"});
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(std::count(two.out.begin(), two.out.end(), '\n'), 1) << two.out;
}

// ---- item 5: images written as they finish -----------------------------------------------------

bool wait_until(const std::function<bool()>& done, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A run killed outright (a second Ctrl-C, a crash) keeps the images finished before: each was
// written when it finished, complete, with its settings.
TEST_F(CliReadme, EachImageIsWrittenWhenItFinishes) {
  const std::string err = tmp("err.txt");
  const pid_t pid =
      spawn({"generate", "red apple", "-n", "64", "-b", "1", "-t", "1", "-o", tmp("i.png")}, err);
  const bool first = wait_until([&] { return slurp(err).find("wrote ") != std::string::npos; }, 60);
  const bool running = waitpid(pid, nullptr, WNOHANG) == 0;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(first) << slurp(err);
  EXPECT_TRUE(running) << "the run ended before its first image was reported";
  EXPECT_NE(slurp(err).find("wrote " + tmp("i_0000.png")), std::string::npos) << slurp(err);
  int w = 0, h = 0;
  EXPECT_NO_THROW(read_png(tmp("i_0000.png"), w, h));
  EXPECT_EQ(w, 64);
  EXPECT_NE(png_text(tmp("i_0000.png"), "parameters").find("image_index=0"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp("i_0063.png")));
}

TEST_F(CliReadme, GridSheetGrowsWhileTheRunLasts) {
  const std::string err = tmp("err.txt");
  const pid_t pid = spawn(
      {"generate", "red apple", "-n", "64", "-b", "1", "-t", "1", "--grid", "-o", tmp("sheet.png")},
      err);
  const bool sheet = wait_until([&] { return fs::exists(tmp("sheet.png")); }, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  ASSERT_TRUE(sheet) << slurp(err);
  int w = 0, h = 0;
  EXPECT_NO_THROW(read_png(tmp("sheet.png"), w, h));  // whole: written atomically
  const std::string params = png_text(tmp("sheet.png"), "parameters");
  EXPECT_NE(params.find("image_index=0"), std::string::npos) << params;
  EXPECT_EQ(params.find("image_index=63"), std::string::npos) << params;
}

}  // namespace

namespace {

// The cells of a markdown table's header lines ("| method | s/image |").
std::vector<std::string> table_headers(const std::string& out) {
  std::vector<std::string> cells;
  std::istringstream in(out);
  std::string line, prev;
  while (std::getline(in, line)) {
    if (line.rfind("|---", 0) == 0) {
      std::istringstream row(prev);
      for (std::string c; std::getline(row, c, '|');) {
        c.erase(0, c.find_first_not_of(' '));
        c.erase(c.find_last_not_of(' ') + 1);
        if (!c.empty()) cells.push_back(c);
      }
    }
    prev = line;
  }
  return cells;
}

}  // namespace

// ---- item 9: the small things ----------------------------------------------------------------

// bench --legend explains every column of both tables (and the vanilla* row), and nothing else.
TEST_F(CliReadme, BenchLegendExplainsEveryColumn) {
  const CliResult r = run(
      {"bench", "--methods", "sjd", "-n", "2", "--draft-lens", "4", "--legend", "-q", "-t", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t legend_at = r.out.find("\nmethod     ");
  ASSERT_NE(legend_at, std::string::npos) << r.out;
  const std::string tables = r.out.substr(0, legend_at), legend = r.out.substr(legend_at + 1);
  const std::vector<std::string> headers = table_headers(tables);
  ASSERT_GE(headers.size(), 20u) << tables;  // 15 speed columns, 5 quality ones
  std::set<std::string> entries;  // what each legend line explains: its text before 2 spaces
  std::istringstream in(legend);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != ' ') entries.insert(line.substr(0, line.find("  ")));
  for (const std::string& h : headers) {
    if (h != "method" || !entries.count("method")) {
      EXPECT_TRUE(entries.count(h)) << h << "\n" << legend;
    }
  }
  for (const std::string& e : entries)
    EXPECT_TRUE(e == "vanilla*" || std::find(headers.begin(), headers.end(), e) != headers.end())
        << "the legend explains '" << e << "', which no table has";
  EXPECT_NE(tables.find("| vanilla* |"), std::string::npos) << tables;
}

TEST_F(CliReadme, ProgramNameHelpAndVersion) {
  for (const std::vector<std::string>& args : {std::vector<std::string>{"--help"}, {"help"}, {}}) {
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("Usage: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tessera [OPTIONS] SUBCOMMAND"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("generate"), std::string::npos) << r.out;
  }
  const CliResult g = run({"help", "generate"});
  EXPECT_EQ(g.code, 0) << g.err;
  EXPECT_NE(g.out.find("tessera generate [OPTIONS] [PROMPT...]"), std::string::npos) << g.out;
  expect_error({"help", "bogus"}, {"unknown command 'bogus'"});
  const CliResult v = run({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out.rfind("tessera 0.1.0 (commit ", 0), 0u) << v.out;
}

// Settings print in the shortest form that reads back exactly, not 0.10000000000000001.
TEST_F(CliReadme, ShortestRoundTripSettings) {
  const CliResult r =
      run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--method", "lantern",
           "--lantern-delta", "0.1", "--draft-len", "4", "-t", "1", "-o", tmp("x.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("lantern.delta=0.1;"), std::string::npos) << r.err;
  EXPECT_NE(png_text(tmp("x.png"), "parameters").find("lantern.delta=0.1;"), std::string::npos);
  const CliResult again =
      run({"generate", "--from-png", tmp("x.png"), "-m", fixture("c2i_f32"), "-o", tmp("y.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(slurp(tmp("x.png")) == slurp(tmp("y.png")));
}

// A class of a model with class names, without -o: the image is named after the class.
TEST_F(CliReadme, ClassWithoutOutputIsNamedAfterIt) {
  const CliResult r =
      run({"generate", "--class", "504", "-t", "1"}, "cd " + shell_quote(tmp_.string()) + " &&");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(tmp("red_apple_twitter.png"))) << r.err;
  const CliResult f = run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "-t", "1"},
                          "cd " + shell_quote(tmp_.string()) + " &&");
  ASSERT_EQ(f.code, 0) << f.err;
  EXPECT_TRUE(fs::exists(tmp("class_3.png"))) << f.err;
}

// --steps shows the default and the range of the model in question (a small MAR has 16 tokens).
TEST_F(CliReadme, MarStepsHelpFollowsTheModel) {
  const std::string mar = std::string(TESSERA_FIXTURES) + "/mar/target_f32";
  const CliResult h = run({"generate", "-m", mar, "--help"});
  ASSERT_EQ(h.code, 0) << h.err;
  EXPECT_NE(h.out.find("MAR: autoregressive steps (default 16, at most 16"), std::string::npos)
      << h.out;
  EXPECT_EQ(h.out.find("--steps INT:INT>=1=64"), std::string::npos) << h.out;
  expect_error(
      {"generate", "-m", mar, "--class", "1", "--steps", "64", "--latents-out", tmp("z.npy")},
      {"--steps", "[1, 16]"});
}

// ---- item 8: --from-png on every format tessera writes, sheets, and models by name -------------

TEST_F(CliReadme, FromPngReadsJpegWebpAndSheets) {
  for (const char* ext : {"jpg", "webp"}) {
    SCOPED_TRACE(ext);
    const std::string a = tmp(std::string("a.") + ext), b = tmp(std::string("b.") + ext);
    ASSERT_EQ(run({"generate", "pizza", "--method", "sd", "--draft-len", "3", "-s", "2", "-t", "1",
                   "-o", a})
                  .code,
              0);
    const CliResult r = run({"generate", "--from-png", a, "-o", b});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_TRUE(slurp(a) == slurp(b));
    EXPECT_NE(r.err.find("drafter=model (named in"), std::string::npos) << r.err;
  }
  // A sheet of 3 images is one run: regenerated whole.
  ASSERT_EQ(
      run({"generate", "cat face", "-n", "3", "--grid", "-s", "5", "-t", "1", "-o", tmp("s.png")})
          .code,
      0);
  const CliResult s = run({"generate", "--from-png", tmp("s.png"), "-o", tmp("t.png")});
  ASSERT_EQ(s.code, 0) << s.err;
  EXPECT_NE(s.err.find("images=3"), std::string::npos) << s.err;
  EXPECT_TRUE(slurp(tmp("s.png")) == slurp(tmp("t.png")));
  // Files that hold no settings, or are no image.
  spit(tmp("none.txt"), "hello");
  expect_error({"generate", "--from-png", tmp("none.txt"), "-o", tmp("x.png")},
               {"not a PNG, JPEG or WebP image"});
  std::string sheet = png_text(tmp("s.png"), "parameters");
  const size_t at = sheet.rfind("seed=5");
  sheet.replace(at, 6, "seed=6");  // the last image is not of the same run
  int w = 0, h = 0;
  const std::vector<uint8_t> px = read_png(tmp("s.png"), w, h);
  write_png(tmp("bad.png"), px.data(), w, h, {{"parameters", sheet}});
  expect_error({"generate", "--from-png", tmp("bad.png"), "-o", tmp("x.png")},
               {"not one run", "image 2"});
}

// An image records its model by name and fingerprint, never by path: another user's copy of the
// model resolves (the default, or -m), a different model is named in the note or error.
TEST_F(CliReadme, FromPngResolvesTheModelByName) {
  ASSERT_EQ(run({"generate", "-m", kTarget, "--class", "7", "-t", "1", "-o", tmp("a.png")}).code,
            0);
  const std::string p = png_text(tmp("a.png"), "parameters");
  EXPECT_EQ(p.find(TESSERA_SOURCE_DIR), std::string::npos) << p;  // no path
  EXPECT_NE(p.find("model=emoji/target; model_hash="), std::string::npos) << p;
  // Another user's copy of the model (another directory, same files) given with -m.
  const fs::path copy = tmp_ / "elsewhere" / "emoji" / "target";
  fs::create_directories(copy);
  for (const char* f : {"config.json", "gpt.safetensors", "vq.safetensors", "classes.json"})
    fs::create_symlink(fs::path(kTarget) / f, copy / f);
  const CliResult m =
      run({"generate", "--from-png", tmp("a.png"), "-m", copy.string(), "-o", tmp("b.png")});
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_EQ(m.err.find("note: --from-png"), std::string::npos) << m.err;  // the same fingerprint
  EXPECT_TRUE(slurp(tmp("a.png")) == slurp(tmp("b.png")));
  // The default model, found by name.
  const CliResult d = run({"generate", "--from-png", tmp("a.png"), "-o", tmp("c.png")});
  ASSERT_EQ(d.code, 0) << d.err;
  EXPECT_NE(d.err.find("--from-png: the model emoji/target is "), std::string::npos) << d.err;
  // Another model: a note with -m, an error naming the model without.
  const CliResult other = run({"generate", "--from-png", tmp("a.png"), "-m", fixture("c2i_f32"),
                               "--tokens-out", tmp("t.npy")});
  EXPECT_NE(other.err.find("is not the model the image was made with (emoji/target"),
            std::string::npos)
      << other.err;
  ASSERT_EQ(
      run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "-t", "1", "-o", tmp("f.png")})
          .code,
      0);
  expect_error({"generate", "--from-png", tmp("f.png"), "-o", tmp("g.png")},
               {"made with the model llamagen/c2i_f32", "give -m DIR"});
}

// ---- item 1: the library's defaults are the model's ---------------------------------------------

// A program that sets no sampling option samples as `tessera generate` does: with the model's
// config.json "sampling" (cfg 1 here), not LlamaGen's cfg 4.
TEST_F(CliReadme, LibrarySamplingDefaultsComeFromTheModel) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["sampling"] = {{"cfg", 1.0}, {"top_k", 7}}; });
  auto pipe = Pipeline::load(dir.string());
  const SamplingOptions d = pipe->default_sampling();
  EXPECT_EQ(d.cfg_scale, 1.0f);
  EXPECT_EQ(d.top_k, 7);
  EXPECT_EQ(d.temperature, 1.0f);  // not in the config: LlamaGen's
  EXPECT_EQ(resolve_sampling({}).cfg_scale, 4.0f);
  const std::vector<Condition> conds = {Condition::label(3)};
  GenerateOptions unset, model, llamagen;
  model.sampling = d;
  llamagen.sampling = resolve_sampling({});
  const auto a = pipe->generate(conds, unset), b = pipe->generate(conds, model),
             c = pipe->generate(conds, llamagen);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);  // cfg 4 and top-k 2000 sample other tokens
  // An explicit value still wins, and a bad one is still refused.
  GenerateOptions bad;
  bad.sampling.cfg_scale = std::numeric_limits<float>::infinity();
  EXPECT_THROW(pipe->generate(conds, bad), ParameterError);
}

// A rate above the machine's memory read bandwidth comes with a word about caches (the fixture's
// few KB of weights always fit in them); one at or below it without.
TEST_F(CliReadme, RatesAboveTheBandwidthMentionCaches) {
  const CliResult r = run({"bench", "-m", fixture("c2i_f32"), "--tokens", "8", "-t", "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto number_after = [&](const std::string& key) {
    const size_t at = r.out.find(key);
    return at == std::string::npos ? -1.0 : std::atof(r.out.c_str() + at + key.size());
  };
  const double machine = number_after("machine read"), achieved = number_after("achieved ");
  ASSERT_GT(machine, 0) << r.out;
  ASSERT_GT(achieved, 0) << r.out;
  const bool note = r.out.find("fit in this CPU's caches") != std::string::npos ||
                    r.out.find("fit partly in this CPU's caches") != std::string::npos;
  EXPECT_EQ(note, achieved > machine) << r.out;
}

// The MAR bench: a bad --draft-lens value is named before any row runs (item 6), and its table is
// the LlamaGen bench's format, with -o csv|json and --legend (item 9).
TEST_F(CliReadme, MarBenchChecksFirstAndSharesTheFormat) {
  const std::string mar = std::string(TESSERA_FIXTURES) + "/mar/target_f32",
                    draft = std::string(TESSERA_FIXTURES) + "/mar/draft_f32";
  const CliResult bad = run({"bench", "-m", mar, "--draft", draft, "--methods", "cspd",
                             "--draft-lens", "2,64", "--steps", "4", "-n", "1", "-t", "1"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("error: --methods cspd: --draft-lens must be in [1, 4]"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.err.find("bench: batch"), std::string::npos) << bad.err;  // no row ran
  const CliResult md =
      run({"bench", "-m", mar, "--draft", draft, "--methods", "cspd", "--draft-lens", "2",
           "--steps", "4", "-n", "1", "-t", "1", "--legend", "-q"});
  ASSERT_EQ(md.code, 0) << md.err;
  const size_t legend_at = md.out.find("\nmethod     ");
  ASSERT_NE(legend_at, std::string::npos) << md.out;
  const std::vector<std::string> headers = table_headers(md.out.substr(0, legend_at));
  ASSERT_EQ(headers.size(), 12u) << md.out;
  std::set<std::string> entries;
  std::istringstream in(md.out.substr(legend_at + 1));
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] != ' ') entries.insert(line.substr(0, line.find("  ")));
  EXPECT_EQ(entries, std::set<std::string>(headers.begin(), headers.end())) << md.out;
  const CliResult csv =
      run({"bench", "-m", mar, "--draft", draft, "--methods", "cspd", "--draft-lens", "2",
           "--steps", "4", "-n", "1", "-t", "1", "-o", "csv", "-q"});
  ASSERT_EQ(csv.code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("method,batch,draft_len,", 0), 0u) << csv.out;
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 3) << csv.out;  // header + 2 rows
}
