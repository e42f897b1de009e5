// The CLI's flags as a user of stable-diffusion.cpp or llama.cpp expects them (issue 24): defaults
// shown as they apply, every flag used or refused, "did you mean", random seeds, output names and
// formats, the settings of a run printed, stored and reproducible (--from-png), early checks, and
// Ctrl-C writing every finished image.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <sstream>
#include <string>
#include <thread>

#include "tessera/image_io.h"

#include "cli_harness.h"

using namespace tessera;

namespace {

const std::string kEmoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/target";

class CliFlags : public CliTest {
 protected:
  // A cheap generation on the small fixture model.
  std::vector<std::string> fixture_run(std::vector<std::string> extra) const {
    std::vector<std::string> args = {"generate", "-m", fixture("c2i_f32"), "--class", "3",
                                     "-t",       "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

// CLI11 2.1 prints a default as "TYPE=VALUE", 2.4 as "TYPE [VALUE]".
bool shows_default(const std::string& help, const std::string& flag, const std::string& value) {
  return help.find(flag + "=" + value + " ") != std::string::npos ||
         help.find(flag + " [" + value + "]") != std::string::npos;
}

TEST_F(CliFlags, HelpShowsTheDefaultsThatApply) {
  // The default model samples at cfg 1 (its config.json), not LlamaGen's 4.
  const CliResult r = run({"generate", "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(shows_default(r.out, "--cfg FLOAT", "1")) << r.out;
  EXPECT_TRUE(shows_default(r.out, "-n,--n INT:INT>=1", "1")) << r.out;
  EXPECT_TRUE(shows_default(r.out, "-b,--batch INT:INT>=1", "1")) << r.out;
  EXPECT_TRUE(shows_default(r.out, "-s,--seed TEXT", "0")) << r.out;
  // With -m, that model's (the fixture has no "sampling": LlamaGen's cfg 4).
  const CliResult m = run({"generate", "-m", fixture("c2i_f32"), "--help"});
  EXPECT_TRUE(shows_default(m.out, "--cfg FLOAT", "4")) << m.out;
  const CliResult b = run({"bench", "--help"});
  EXPECT_TRUE(shows_default(b.out, "--cfg FLOAT", "1")) << b.out;
}

// CLI11 >= 2.4 throws at start-up when a positional is named like an option of its command (it
// could not tell them apart in a config file); 2.1, which CI builds with, accepts it. Read every
// command's help and hold the names apart, so a newer CLI11 (Ubuntu 24.04's) still starts.
TEST_F(CliFlags, PositionalNamesAreNotOptionNames) {
  for (const std::string cmd :
       {"generate", "forward", "decode", "classes", "bench", "tune", "serve", "devices"}) {
    const CliResult r = run({cmd, "--help"});
    ASSERT_EQ(r.code, 0) << cmd << ": " << r.err;
    std::istringstream in(r.out);
    std::vector<std::string> positionals, options;
    std::string line, section;
    while (std::getline(in, line)) {
      if (line == "Positionals:" || line == "Options:") section = line;
      if (line.rfind("  ", 0) != 0 || line.size() < 3 || line[2] == ' ') continue;
      const std::string names = line.substr(2, line.find(' ', 2) - 2);
      if (section == "Positionals:") {
        positionals.push_back(names);
      } else {
        std::istringstream parts(names);  // "-n,--n" -> n, n
        for (std::string part; std::getline(parts, part, ',');)
          options.push_back(part.substr(part.find_first_not_of('-')));
      }
    }
    for (const std::string& p : positionals)
      EXPECT_EQ(std::count(options.begin(), options.end(), p), 0)
          << "tessera " << cmd << ": the positional '" << p << "' is also an option's name";
  }
}

// --tree chain:N is the chain; a static tree runs, is stored in the image and reproduces from it.
TEST_F(CliFlags, TreeDraftsRunAndChainTreesAreChains) {
  const std::vector<std::string> sd = {"--method", "sd", "--draft", fixture("c2i_f32"), "-s", "5"};
  auto gen = [&](std::vector<std::string> extra, const std::string& name) {
    std::vector<std::string> args = fixture_run(sd);
    args.insert(args.end(), extra.begin(), extra.end());
    args.insert(args.end(), {"--tokens-out", tmp(name + ".npy"), "-o", tmp(name + ".png")});
    const CliResult r = run(args);
    EXPECT_EQ(r.code, 0) << r.err;
    return slurp(tmp(name + ".npy"));
  };
  EXPECT_EQ(gen({"--draft-len", "3", "--tree", "chain:3"}, "tree"),
            gen({"--draft-len", "3"}, "chain"));
  const std::string tree = gen({"--tree", "kary:2,2,1"}, "kary");
  EXPECT_NE(png_text(tmp("kary.png"), "parameters").find("tree=kary:2,2,1;"), std::string::npos);
  const CliResult again = run({"generate", "--from-png", tmp("kary.png"), "-m", fixture("c2i_f32"),
                               "--tokens-out", tmp("again.npy"), "-o", tmp("again.png")});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(slurp(tmp("again.npy")), tree);
  // A relaxed rule on LANTERN++'s static tree: stored with its parameters, reproduced.
  const CliResult lpp =
      run(fixture_run({"--method", "lantern++", "--draft", fixture("c2i_f32"), "-s", "5", "--tree",
                       "naive_extend_57", "--tokens-out", tmp("lpp.npy"), "-o", tmp("lpp.png")}));
  ASSERT_EQ(lpp.code, 0) << lpp.err;
  EXPECT_NE(png_text(tmp("lpp.png"), "parameters").find("tree=naive_extend_57;"),
            std::string::npos);
  const CliResult lpp_again =
      run({"generate", "--from-png", tmp("lpp.png"), "-m", fixture("c2i_f32"), "--tokens-out",
           tmp("lpp2.npy"), "-o", tmp("lpp2.png")});
  ASSERT_EQ(lpp_again.code, 0) << lpp_again.err;
  EXPECT_EQ(slurp(tmp("lpp2.npy")), slurp(tmp("lpp.npy")));
}

TEST_F(CliFlags, DidYouMean) {
  expect_error({"generat", "red apple"}, {"unknown command 'generat'", "did you mean 'generate'"});
  expect_error({"generate", "--sead", "3", "red apple"}, {"--sead", "did you mean --seed"});
  expect_error({"bench", "-m", fixture("c2i_f32"), "--methods", "lantren"},
               {"lantren", "did you mean lantern"});
}

TEST_F(CliFlags, FlagsANonUsingRunWouldIgnoreAreRefused) {
  const std::string m = fixture("c2i_f32");
  expect_error({"bench", "-m", m, "--method", "sjd"}, {"--methods"});
  expect_error({"bench", "-m", m, "--lantern-k", "5"}, {"--lantern-k", "--methods"});
  expect_error(fixture_run({"--steps", "10", "-o", tmp("x.png")}), {"--steps", "MAR models only"});
  expect_error(fixture_run({"--lantern-k", "5", "-o", tmp("x.png")}),
               {"--lantern-k", "lantern", "vanilla does not use it"});
  expect_error(fixture_run({"--method", "sd", "--lantern-k", "5", "-o", tmp("x.png")}),
               {"--lantern-k", "sd does not use it"});
  expect_error(fixture_run({"--draft-len", "4", "-o", tmp("x.png")}),
               {"--draft-len", "vanilla drafts nothing"});
  expect_error(fixture_run({"--method", "cspd", "-o", tmp("x.png")}), {"cspd", "MAR models only"});
  expect_error(fixture_run({"--method", "bogus", "-o", tmp("x.png")}), {"bogus", "unknown method"});
  expect_error(fixture_run({"-q", "-v", "-o", tmp("x.png")}), {"-q", "-v"});
  EXPECT_FALSE(fs::exists(tmp("x.png")));
}

TEST_F(CliFlags, BenchChecksItsMethodsBeforeTheBaseline) {
  const CliResult r = run({"bench", "-m", fixture("c2i_f32"), "-t", "1", "--methods", "sd,bogus"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("bogus"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("bench: vanilla"), std::string::npos) << r.err;
  expect_error({"bench", "-m", fixture("c2i_f32"), "--methods", "cspd"}, {"MAR models only"});
}

TEST_F(CliFlags, NotAModelDirectory) {
  expect_error({"generate", "-m", std::string(TESSERA_SOURCE_DIR) + "/models/emoji", "red apple"},
               {"not a model directory", "target", "draft"});
  expect_error({"classes", "-m", tmp("missing")}, {"no such directory"});
}

TEST_F(CliFlags, UnwritableOutputFailsBeforeGenerating) {
  const CliResult r = run(fixture_run({"-o", tmp("no/such/dir/x.png")}));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("generated"), std::string::npos) << r.err;
}

TEST_F(CliFlags, NegativeSeedIsRandomPrintedAndStored) {
  const CliResult r = run(fixture_run({"-s", "-1", "-o", tmp("x.png")}));
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = r.err.find("seed ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string seed = r.err.substr(at + 5, r.err.find(' ', at + 5) - at - 5);
  EXPECT_NE(r.err.find("(random)"), std::string::npos) << r.err;
  EXPECT_NE(seed, "18446744073709551615");
  EXPECT_NE(png_text(tmp("x.png"), "parameters").find("seed=" + seed + ";"), std::string::npos);
  expect_error(fixture_run({"-s", "abc", "-o", tmp("y.png")}), {"-s abc", "not an integer"});
}

TEST_F(CliFlags, OutputNamePatternsAndBeginIndex) {
  ASSERT_EQ(
      run(fixture_run({"-n", "3", "-o", tmp("img_%03d.png"), "--output-begin-idx", "7"})).code, 0);
  for (const char* n : {"img_007.png", "img_008.png", "img_009.png"})
    EXPECT_TRUE(fs::exists(tmp(n))) << n;
  ASSERT_EQ(run(fixture_run({"-n", "2", "-o", tmp("s.png"), "--output-begin-idx", "4"})).code, 0);
  EXPECT_TRUE(fs::exists(tmp("s_0004.png")) && fs::exists(tmp("s_0005.png")));
  expect_error(fixture_run({"-o", tmp("x_%s.png")}), {"%d"});
  expect_error(fixture_run({"-o", tmp("x_%d_%d.png")}), {"more than one"});
}

TEST_F(CliFlags, ImageFormatFollowsTheExtension) {
  ASSERT_EQ(run(fixture_run({"-o", tmp("x.jpg")})).code, 0);
  const std::string jpg = slurp(tmp("x.jpg"));
  ASSERT_GE(jpg.size(), 3u);
  EXPECT_EQ(jpg.substr(0, 3), std::string("\xFF\xD8\xFF"));  // JPEG SOI, not PNG bytes
  EXPECT_NE(jpg.find("seed=0;"), std::string::npos);         // the settings, in a COM marker
  ASSERT_EQ(run(fixture_run({"-o", tmp("x.webp")})).code, 0);
  const std::string webp = slurp(tmp("x.webp"));
  EXPECT_EQ(webp.substr(0, 4), "RIFF");
  EXPECT_EQ(webp.substr(8, 4), "WEBP");
  // The RIFF size field covers the rest of the file (the metadata chunk was assembled in), and the
  // settings sit in an XMP chunk.
  ASSERT_GE(webp.size(), 12u);
  const auto* b = reinterpret_cast<const unsigned char*>(webp.data());
  EXPECT_EQ(b[4] | b[5] << 8 | b[6] << 16 | static_cast<uint32_t>(b[7]) << 24, webp.size() - 8);
  EXPECT_NE(webp.find("XMP "), std::string::npos);
  EXPECT_NE(webp.find("tessera:parameters=\""), std::string::npos);
  EXPECT_NE(webp.find("seed=0;"), std::string::npos);
  // --from-png reads its settings back from either (the readers, on the cheap model).
  for (const char* ext : {"jpg", "webp"}) {
    const std::string again = tmp(std::string("y.") + ext);
    const CliResult r = run({"generate", "--from-png", tmp(std::string("x.") + ext), "-m",
                             fixture("c2i_f32"), "-o", again});
    ASSERT_EQ(r.code, 0) << ext << ": " << r.err;
    EXPECT_TRUE(slurp(again) == slurp(tmp(std::string("x.") + ext))) << ext;
  }
  spit(tmp("none.txt"), "hello");
  expect_error({"generate", "--from-png", tmp("none.txt"), "-o", tmp("z.png")},
               {"not a PNG, JPEG or WebP image"});
  expect_error(fixture_run({"-o", tmp("x.bmp")}), {".bmp", "png", "jpg", "webp"});
  EXPECT_FALSE(fs::exists(tmp("x.bmp")));
}

TEST_F(CliFlags, VerboseAndThreadNotes) {
  const CliResult v = run(fixture_run({"-v", "-o", tmp("x.png")}));
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.err.find("load "), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("time split"), std::string::npos) << v.err;
  const CliResult t =
      run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "-t", "4096", "-o", tmp("y.png")});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.err.find("physical cores"), std::string::npos) << t.err;
  EXPECT_NE(t.err.find("4096 threads requested"), std::string::npos) << t.err;
}

TEST_F(CliFlags, RunLineAndStatsCarryTheSettings) {
  const CliResult r = run(fixture_run({"--method", "lantern", "--lantern-k", "3", "-s", "5",
                                       "--stats-out", tmp("s.json"), "-o", tmp("x.png")}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("run: model="), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("drafter=jacobi (no --draft given"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(slurp(tmp("s.json")));
  const auto& s = j.at("settings");
  EXPECT_EQ(s.at("method"), "lantern");
  EXPECT_EQ(s.at("lantern.k"), "3");
  EXPECT_EQ(s.at("seed"), "5");
  EXPECT_EQ(s.at("drafter"), "jacobi");
  EXPECT_EQ(s.at("cfg"), "4");
  EXPECT_FALSE(s.at("tessera").get<std::string>().empty());
  const std::string p = png_text(tmp("x.png"), "parameters");
  for (const char* k : {"method=lantern;", "lantern.k=3;", "drafter=jacobi;", "draft_len=auto;",
                        "seed=5;", "top_k=2000;", "image_index=0"})
    EXPECT_NE(p.find(k), std::string::npos) << k << " in " << p;
}

// The acceptance test of --from-png: the second image of a speculative run with parameters on the
// default model, regenerated alone from its PNG, is the same file byte for byte.
TEST_F(CliFlags, FromPngReproducesAnImageExactly) {
  const CliResult a = run({"generate", "red apple", "--method", "lantern", "--lantern-k", "7",
                           "--lantern-delta", "0.2", "-s", "11", "-n", "2", "-o", tmp("a.png")});
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_NE(a.err.find("drafter=model (named in "), std::string::npos) << a.err;
  const CliResult b = run({"generate", "--from-png", tmp("a_0001.png"), "-o", tmp("b.png")});
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(slurp(tmp("b.png")), slurp(tmp("a_0001.png")));
  EXPECT_NE(slurp(tmp("b.png")), slurp(tmp("a_0000.png")));
  // A flag given with --from-png overrides the stored one.
  ASSERT_EQ(run({"generate", "--from-png", tmp("a_0001.png"), "-s", "12", "-o", tmp("c.png")}).code,
            0);
  EXPECT_NE(png_text(tmp("c.png"), "parameters").find("seed=12;"), std::string::npos);
  EXPECT_NE(slurp(tmp("c.png")), slurp(tmp("a_0001.png")));
}

// A sheet of images (--grid) is one run: --from-png regenerates it whole, and refuses a sheet
// whose images are not of one run (the README's sheet example, here on the small fixture model so
// that it runs under the sanitizers too).
TEST_F(CliFlags, FromPngReadsASheetAsOneRun) {
  ASSERT_EQ(run(fixture_run({"-n", "3", "--grid", "-s", "5", "-o", tmp("s.png")})).code, 0);
  const CliResult r =
      run({"generate", "--from-png", tmp("s.png"), "-m", fixture("c2i_f32"), "-o", tmp("t.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("images=3"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(tmp("s.png")) == slurp(tmp("t.png")));
  std::string sheet = png_text(tmp("s.png"), "parameters");
  const size_t at = sheet.rfind("seed=5");
  ASSERT_NE(at, std::string::npos) << sheet;
  sheet.replace(at, 6, "seed=6");  // the last image is not of the same run
  int w = 0, h = 0;
  const std::vector<uint8_t> px = read_png(tmp("s.png"), w, h);
  write_png(tmp("bad.png"), px.data(), w, h, {{"parameters", sheet}});
  expect_error(
      {"generate", "--from-png", tmp("bad.png"), "-m", fixture("c2i_f32"), "-o", tmp("x.png")},
      {"not one run", "image 2"});
}

// Waits until `needle` shows in the file (true) or the time is up.
bool wait_for(const std::string& path, const std::string& needle, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (slurp(path).find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int wait_exit(pid_t pid) {
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -WTERMSIG(st);
}

TEST_F(CliFlags, CtrlCWritesEveryFinishedImageAndExits130) {
  const std::string err = tmp("err.txt");
  const pid_t pid =
      spawn({"generate", "red apple", "-n", "64", "-b", "1", "-o", tmp("i.png")}, err);
  ASSERT_TRUE(wait_for(err, "run: ", 60)) << slurp(err);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  kill(pid, SIGINT);
  const int code = wait_exit(pid);
  const std::string e = slurp(err);
  EXPECT_EQ(code, 130) << e;
  EXPECT_NE(e.find("interrupted: finishing"), std::string::npos) << e;
  const size_t at = e.find("interrupted: ", e.find("interrupted: finishing") + 1);
  ASSERT_NE(at, std::string::npos) << e;
  const int written = std::atoi(e.c_str() + at + 13);
  EXPECT_GE(written, 1) << e;
  EXPECT_LT(written, 64) << e;
  EXPECT_NE(e.find(std::to_string(written) + " of 64 images generated and written"),
            std::string::npos)
      << e;
  int files = 0;
  for (const auto& entry : fs::directory_iterator(tmp_))
    if (entry.path().extension() == ".png") ++files;
  EXPECT_EQ(files, written);
  for (int i = 0; i < written; ++i) {  // complete, valid images with their settings
    char name[32];
    std::snprintf(name, sizeof name, "i_%04d.png", i);
    int w = 0, h = 0;
    EXPECT_NO_THROW(read_png(tmp(name), w, h)) << name;
    EXPECT_EQ(w, 64);
    EXPECT_NE(png_text(tmp(name), "parameters").find("image_index=" + std::to_string(i)),
              std::string::npos);
  }
}

TEST_F(CliFlags, SecondCtrlCExitsAtOnce) {
  const std::string err = tmp("err.txt");
  const pid_t pid =
      spawn({"generate", "red apple", "-n", "64", "-b", "64", "-o", tmp("i.png")}, err);
  ASSERT_TRUE(wait_for(err, "run: ", 60)) << slurp(err);
  kill(pid, SIGINT);
  ASSERT_TRUE(wait_for(err, "interrupted: finishing", 10)) << slurp(err);
  const auto t0 = std::chrono::steady_clock::now();
  kill(pid, SIGINT);
  EXPECT_EQ(wait_exit(pid), 130);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 5.0);
  EXPECT_NE(slurp(err).find("interrupted again"), std::string::npos) << slurp(err);
}

}  // namespace
