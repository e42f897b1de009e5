// The CLI's outputs when writing fails (issue 21, "atomic output"). An output (PNG, .npy, stats
// JSON, heatmap) whose write fails, from a file size limit, a full disk, or a directory that is
// missing or not writable, ends the run non-zero with exactly one stderr line "error: ..." naming
// the file and the OS reason, and leaves no torn file: nothing new under the target name, a
// previous file byte-identical, no temporary in the directory. Output paths are checked before
// any work. A multi-image run names the images written before the failure; they stay (each is a
// complete file).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tessera/image_io.h"

#include "cli_harness.h"

using namespace tessera;

namespace {

const std::string kEmoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/target";
const std::string kMar = fixture("../mar/target_f32");
const std::string kPrevious = "previous contents\n";

// A file size limit for the command: with SIGXFSZ ignored (which exec keeps), a write past it
// fails with EFBIG, "File too large", part-way through the file. sh counts ulimit -f in 512-byte
// blocks (dash) or 1 KiB ones (bash): every file made to fail under `ulimit -f 1` is over 1 KiB,
// and the one error line fits in 512 bytes.
std::string file_size_limit(int blocks) {
  return "trap '' XFSZ; ulimit -f " + std::to_string(blocks) + ";";
}

// Each command here takes well under a second (-t 1: the machine may be busy with builds).
constexpr double kMaxSeconds = 10.0;

bool is_temporary(const std::string& name) {
  return name.size() > 4 && name.front() == '.' && name.compare(name.size() - 4, 4, ".tmp") == 0;
}

class CliWriteFailure : public CliTest {
 protected:
  // The command must fail within kMaxSeconds with one "error: ..." line containing each needle.
  CliResult expect_failure(const std::vector<std::string>& args,
                           const std::vector<std::string>& needles,
                           const std::string& prefix = "") const {
    std::string shown = prefix + " tessera";
    for (const auto& a : args) shown += " " + a;
    SCOPED_TRACE(shown);
    const auto t0 = std::chrono::steady_clock::now();
    const CliResult r = run(args, prefix);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_TRUE(r.exited) << "killed by a signal; stderr: " << r.err;
    EXPECT_NE(r.code, 0) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
    for (const auto& n : needles)
      EXPECT_NE(r.err.find(n), std::string::npos) << "expected '" << n << "' in: " << r.err;
    EXPECT_LT(seconds, kMaxSeconds);
    return r;
  }

  static std::vector<std::string> entries(const fs::path& dir) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  static void expect_no_temporary(const fs::path& dir) {
    for (const auto& name : entries(dir)) EXPECT_FALSE(is_temporary(name)) << dir / name;
  }

  // args write `target` (a name in the scratch directory) and fail with `reason`: once with no
  // file under the name (none after), once over a previous file (byte-identical after).
  void expect_no_torn_file(const std::vector<std::string>& args, const std::string& target,
                           const std::string& reason, const std::string& prefix) const {
    for (const bool existed : {false, true}) {
      SCOPED_TRACE(existed ? "over a previous file" : "no previous file");
      if (existed) spit(tmp(target), kPrevious);
      expect_failure(args, {"cannot write " + tmp(target) + ": " + reason}, prefix);
      if (existed)
        EXPECT_EQ(slurp(tmp(target)), kPrevious);
      else
        EXPECT_FALSE(fs::exists(tmp(target)));
      expect_no_temporary(tmp_);
    }
  }

  std::vector<std::string> gen_c2i(std::vector<std::string> more) const {
    std::vector<std::string> a = {"generate", "-m", fixture("c2i_f32"), "--class", "3", "-q",
                                  "-t",       "1"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  std::vector<std::string> gen_mar(std::vector<std::string> more) const {
    std::vector<std::string> a = {"generate", "-m", kMar, "--class", "1", "-q", "-t", "1"};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }

  // tokens.npy [4, 16, 16] for the emoji model: three flat images (small PNGs, about 3 KiB) and a
  // noisy one (about 10 KiB).
  std::string emoji_tokens() const {
    std::vector<int32_t> ids(4 * 256);
    uint32_t state = 12345;
    for (size_t i = 0; i < ids.size(); ++i) {
      state = state * 1664525u + 1013904223u;
      ids[i] = i < 256 ? 5 : i < 512 ? 17 : i < 768 ? 100 : static_cast<int32_t>(state >> 22);
    }
    write_npy(tmp("tokens.npy"), {4, 16, 16}, ids);
    return tmp("tokens.npy");
  }
};

// ---- a write that fails part-way: a file size limit (EFBIG), no privileges needed ------------

TEST_F(CliWriteFailure, PngPastTheFileSizeLimit) {
  // A grid of four 16 px images: about 3.6 KiB.
  expect_no_torn_file(gen_c2i({"-n", "4", "--grid", "-o", tmp("x.png")}), "x.png", "File too large",
                      file_size_limit(1));
}

TEST_F(CliWriteFailure, TokensNpyPastTheFileSizeLimit) {
  expect_no_torn_file(gen_c2i({"-n", "16", "--tokens-out", tmp("t.npy")}), "t.npy",
                      "File too large", file_size_limit(1));  // 1152 bytes
}

TEST_F(CliWriteFailure, StatsJsonPastTheFileSizeLimit) {
  // The statistics are written first: the run stops there, so the tokens are not written either.
  expect_no_torn_file(
      gen_c2i({"-n", "8", "--stats-out", tmp("s.json"), "--tokens-out", tmp("t.npy")}), "s.json",
      "File too large", file_size_limit(1));  // about 2 KiB
  EXPECT_FALSE(fs::exists(tmp("t.npy")));
}

TEST_F(CliWriteFailure, LogitsNpyPastTheFileSizeLimit) {
  expect_no_torn_file({"forward", "-m", fixture("c2i_f32"), "--class", "3", "--tokens", "1,2,3",
                       "-q", "-t", "1", "--logits-out", tmp("l.npy")},
                      "l.npy", "File too large", file_size_limit(1));  // [4, 256] f32: 4 KiB
}

TEST_F(CliWriteFailure, MarLatentsAndPngPastTheFileSizeLimit) {
  expect_no_torn_file(gen_mar({"--latents-out", tmp("z.npy")}), "z.npy", "File too large",
                      file_size_limit(1));  // 1152 bytes
  expect_no_torn_file(gen_mar({"-o", tmp("m.png")}), "m.png", "File too large",
                      file_size_limit(1));  // about 9 KiB
}

// Image 3 of 4 is the only one over the limit (8 blocks: 4 or 8 KiB, whichever sh counts): the
// error names it and the three written before it, which are complete PNGs.
TEST_F(CliWriteFailure, MultiImageRunNamesTheImagesWritten) {
  const std::string tokens = emoji_tokens();
  const std::vector<std::string> args = {"decode", "-m", kEmoji, "--tokens", tokens,
                                         "-q",     "-t", "1",    "-o",       tmp("d.png")};
  for (const bool existed : {false, true}) {
    SCOPED_TRACE(existed ? "over a previous file" : "no previous file");
    if (existed) spit(tmp("d_0003.png"), kPrevious);
    expect_failure(args,
                   {"cannot write " + tmp("d_0003.png") + ": File too large (written: " +
                    tmp("d_0000.png") + ", " + tmp("d_0001.png") + ", " + tmp("d_0002.png") + ")"},
                   file_size_limit(8));
    for (int i = 0; i < 3; ++i) {
      int w = 0, h = 0;
      const std::string name = tmp("d_000" + std::to_string(i) + ".png");
      EXPECT_NO_THROW(read_png(name, w, h)) << name;
      EXPECT_EQ(w, 64) << name;
    }
    if (existed)
      EXPECT_EQ(slurp(tmp("d_0003.png")), kPrevious);
    else
      EXPECT_FALSE(fs::exists(tmp("d_0003.png")));
    expect_no_temporary(tmp_);
  }
}

// ---- a full disk (ENOSPC): a 64 KiB tmpfs in a mount namespace of its own (root only) ---------

class CliFullDisk : public CliWriteFailure {
 protected:
  // Runs `script` (sh) in a mount namespace of its own in which a 64 KiB tmpfs is mounted on
  // $D (the scratch directory's "disk"); the mount is gone when the script ends, so the script
  // copies out what is to be checked. $E is the scratch directory, $B the tessera binary.
  // False when this cannot be arranged (not root, no unshare or tmpfs): the test is skipped.
  bool run_on_small_disk(const std::string& script) const {
    if (::geteuid() != 0) return false;
    fs::create_directory(tmp_ / "disk");
    const std::string env = "D=" + shell_quote(tmp("disk")) + " E=" + shell_quote(tmp_.string()) +
                            " B=" + shell_quote(TESSERA_BINARY) + " ";
    const std::string mount = "mount -t tmpfs -o size=64k tmpfs \"$D\"";
    const std::string probe =
        env + "unshare -m sh -c " + shell_quote(mount) + " >/dev/null 2>&1 </dev/null";
    if (std::system(probe.c_str()) != 0) return false;
    const std::string cmd = env + "unshare -m sh -c " +
                            shell_quote(mount + " || exit 99\n" + script) + " >" +
                            shell_quote(tmp("script.log")) + " 2>&1 </dev/null";
    const int st = std::system(cmd.c_str());
    EXPECT_EQ(st, 0) << slurp(tmp("script.log"));
    return true;
  }

  // sh lines that run tessera with `args` ($D, $E expand), its stderr to $E/err_K, its exit
  // status to $E/rc_K and its seconds to $E/s_K.
  static std::string tessera_step(int k, const std::vector<std::string>& args) {
    std::string cmd = "t0=$(date +%s%N); \"$B\"";
    for (const auto& a : args) cmd += " " + a;  // already quoted for sh, with $D/$E unquoted
    const std::string K = std::to_string(k);
    return cmd + " >/dev/null 2>\"$E/err_" + K + "\"; echo $? >\"$E/rc_" + K +
           "\"; echo $(( ($(date +%s%N) - t0) / 1000000 )) >\"$E/ms_" + K + "\"\n";
  }

  // Step k failed in time with one error line "error: cannot write TARGET: No space left on
  // device..."; target: its path under $D.
  void expect_step_failed(int k, const std::string& target) const {
    const std::string K = std::to_string(k);
    SCOPED_TRACE("step " + K + ", " + target);
    const std::string err = slurp(tmp("err_" + K));
    EXPECT_NE(slurp(tmp("rc_" + K)), "0\n") << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    const std::string want =
        "error: cannot write " + tmp("disk") + "/" + target + ": No space left on device";
    EXPECT_EQ(err.rfind(want, 0), 0u) << "expected '" << want << "' at the start of: " << err;
    EXPECT_LT(std::stod(slurp(tmp("ms_" + K))) / 1000.0, kMaxSeconds);
  }
};

// The disk is full: every kind of output fails, a previous PNG stays, nothing else appears.
TEST_F(CliFullDisk, EveryOutputFailsCleanly) {
  const std::string c2i = shell_quote(fixture("c2i_f32")), mar = shell_quote(kMar);
  const std::vector<std::vector<std::string>> steps = {
      {"generate", "-m", c2i, "--class", "3", "-q", "-t", "1", "-o", "$D/x.png"},
      {"generate", "-m", c2i, "--class", "3", "-q", "-t", "1", "--tokens-out", "$D/t.npy"},
      {"generate", "-m", c2i, "--class", "3", "-q", "-t", "1", "--stats-out", "$D/s.json",
       "--tokens-out", "$D/t2.npy"},
      {"generate", "-m", c2i, "--class", "3", "-q", "-t", "1", "--heatmap-out", "$D/h.png",
       "--tokens-out", "$D/t3.npy"},
      {"generate", "-m", mar, "--class", "1", "-q", "-t", "1", "--stats-out", "$D/ms.json",
       "--latents-out", "$D/z.npy"},
      {"generate", "-m", mar, "--class", "1", "-q", "-t", "1", "--latents-out", "$D/z2.npy"},
  };
  std::string script =
      "printf 'previous contents\\n' >\"$D/x.png\"\n"
      "cat /dev/zero >\"$D/fill\" 2>/dev/null\n";  // fails when the disk is full, as intended
  for (size_t k = 0; k < steps.size(); ++k) script += tessera_step(static_cast<int>(k), steps[k]);
  script += "ls -A \"$D\" >\"$E/listing\"; cp \"$D/x.png\" \"$E/x_after.png\"\n";
  if (!run_on_small_disk(script)) GTEST_SKIP() << "needs root, unshare -m and tmpfs";
  const std::vector<std::string> targets = {"x.png", "t.npy",   "s.json",
                                            "h.png", "ms.json", "z2.npy"};
  for (size_t k = 0; k < steps.size(); ++k) expect_step_failed(static_cast<int>(k), targets[k]);
  EXPECT_EQ(slurp(tmp("listing")), "fill\nx.png\n");  // no new file, no temporary
  EXPECT_EQ(slurp(tmp("x_after.png")), kPrevious);
}

// Room for three of the four images: the error names the three, which are complete PNGs.
TEST_F(CliFullDisk, MultiImageRunNamesTheImagesWritten) {
  const std::string tokens = emoji_tokens();
  std::string script = "head -c 49152 /dev/zero >\"$D/fill\"\n";  // 16 KiB (4 pages) left
  script += tessera_step(0, {"decode", "-m", shell_quote(kEmoji), "--tokens", shell_quote(tokens),
                             "-q", "-t", "1", "-o", "$D/d.png"});
  script += "ls -A \"$D\" >\"$E/listing\"; mkdir \"$E/out\"; cp \"$D\"/d_*.png \"$E/out/\"\n";
  if (!run_on_small_disk(script)) GTEST_SKIP() << "needs root, unshare -m and tmpfs";
  const std::string d = tmp("disk") + "/";
  expect_step_failed(0, "d_0003.png");
  EXPECT_NE(slurp(tmp("err_0"))
                .find("(written: " + d + "d_0000.png, " + d + "d_0001.png, " + d + "d_0002.png)"),
            std::string::npos)
      << slurp(tmp("err_0"));
  EXPECT_EQ(slurp(tmp("listing")), "d_0000.png\nd_0001.png\nd_0002.png\nfill\n");
  for (int i = 0; i < 3; ++i) {
    int w = 0, h = 0;
    const std::string name = tmp("out/d_000" + std::to_string(i) + ".png");
    EXPECT_NO_THROW(read_png(name, w, h)) << name;
    EXPECT_EQ(w, 64) << name;
  }
}

// ---- output paths are checked before any work ------------------------------------------------

// A subcommand and one output flag; "%/" in args is the scratch directory.
struct OutputCase {
  std::string name;
  std::vector<std::string> args;  // the output path follows
  std::string flag;
  std::string ext;
};

void PrintTo(const OutputCase& c, std::ostream* os) {
  *os << c.name;
}

class CliOutputChecks : public CliWriteFailure, public ::testing::WithParamInterface<OutputCase> {
 protected:
  // The case's arguments with the output path appended. Without -q: the one error line also
  // shows that nothing (no progress, no "generated ...") came before it.
  std::vector<std::string> args_with(const std::string& out) const {
    std::vector<std::string> a;
    for (const auto& s : GetParam().args)
      a.push_back(s.rfind("%/", 0) == 0   ? tmp(s.substr(2))
                  : s.rfind("@/", 0) == 0 ? fixture(s.substr(2))
                                          : s);
    a.insert(a.end(), {"-t", "1", GetParam().flag, out});
    return a;
  }
  std::string error_for(const std::string& out, const std::string& reason) const {
    return GetParam().flag + ": cannot write " + out + ": " + reason;
  }
};

TEST_P(CliOutputChecks, MissingOrWrongDirectory) {
  const std::string ext = GetParam().ext;
  // The directory does not exist.
  const std::string missing = tmp("no_dir/out" + ext);
  expect_failure(args_with(missing), {error_for(missing, "directory " + tmp("no_dir") +
                                                             ": No such file or directory")});
  EXPECT_FALSE(fs::exists(tmp("no_dir")));
  // The "directory" is a file.
  spit(tmp("file"), "data");
  const std::string under_file = tmp("file/out" + ext);
  expect_failure(args_with(under_file),
                 {error_for(under_file, "directory " + tmp("file") + ": Not a directory")});
  EXPECT_EQ(slurp(tmp("file")), "data");
  // The output name is a directory.
  fs::create_directory(tmp("out" + ext));
  expect_failure(args_with(tmp("out" + ext)), {error_for(tmp("out" + ext), "Is a directory")});
  EXPECT_TRUE(fs::is_directory(tmp("out" + ext)));
  EXPECT_TRUE(fs::is_empty(tmp("out" + ext)));
  expect_no_temporary(tmp_);
}

// The directory exists but may not be written: a new file is refused, a previous one stays.
// Root ignores permissions, so for root the command runs as nobody (setpriv).
TEST_P(CliOutputChecks, UnwritableDirectory) {
  std::string prefix;
  if (::geteuid() == 0) {
    if (std::system("command -v setpriv >/dev/null 2>&1") != 0)
      GTEST_SKIP() << "root without setpriv: cannot drop root's rights";
    prefix = "setpriv --reuid=65534 --regid=65534 --clear-groups";
  }
  const std::string ext = GetParam().ext;
  fs::create_directory(tmp("ro"));
  spit(tmp("ro/old" + ext), kPrevious);
  ASSERT_EQ(::chmod(tmp("ro").c_str(), 0555), 0);
  expect_failure(args_with(tmp("ro/new" + ext)),
                 {error_for(tmp("ro/new" + ext), "directory " + tmp("ro") + ": Permission denied")},
                 prefix);
  expect_failure(args_with(tmp("ro/old" + ext)),
                 {GetParam().flag + ": cannot write " + tmp("ro/old" + ext), "Permission denied"},
                 prefix);
  ASSERT_EQ(::chmod(tmp("ro").c_str(), 0755), 0);
  EXPECT_EQ(entries(tmp("ro")), std::vector<std::string>{"old" + ext});
  EXPECT_EQ(slurp(tmp("ro/old" + ext)), kPrevious);
}

INSTANTIATE_TEST_SUITE_P(
    Cli, CliOutputChecks,
    ::testing::Values(
        OutputCase{"GeneratePng", {"generate", "-m", "@/c2i_f32", "--class", "3"}, "-o", ".png"},
        OutputCase{"GenerateTokens",
                   {"generate", "-m", "@/c2i_f32", "--class", "3"},
                   "--tokens-out",
                   ".npy"},
        OutputCase{"GenerateStats",
                   {"generate", "-m", "@/c2i_f32", "--class", "3", "--tokens-out", "/dev/null"},
                   "--stats-out",
                   ".json"},
        OutputCase{"GenerateHeatmap",
                   {"generate", "-m", "@/c2i_f32", "--class", "3", "--tokens-out", "/dev/null"},
                   "--heatmap-out",
                   ".png"},
        OutputCase{"GenerateMarLatents",
                   {"generate", "-m", "@/../mar/target_f32", "--class", "1"},
                   "--latents-out",
                   ".npy"},
        OutputCase{"ForwardLogits",
                   {"forward", "-m", "@/c2i_f32", "--class", "3", "--tokens", "1,2"},
                   "--logits-out",
                   ".npy"},
        OutputCase{"ForwardMarZ",
                   {"forward", "-m", "@/../mar/target_f32", "--class", "1", "--latents",
                    "@/../mar/golden/mae_tokens.npy"},
                   "--z-out",
                   ".npy"},
        OutputCase{"DecodePng",
                   {"decode", "-m", "@/c2i_f32", "--tokens", "@/golden/vq_tokens.npy"},
                   "-o",
                   ".png"},
        OutputCase{
            "DecodeMarPng",
            {"decode", "-m", "@/../mar/target_f32", "--latents", "@/../mar/golden/diff_xT.npy"},
            "-o",
            ".png"}),
    [](const ::testing::TestParamInfo<OutputCase>& info) { return info.param.name; });

// Every numbered name is checked: a directory in the way of image 1 fails the run before image 0
// is generated.
TEST_F(CliWriteFailure, NumberedOutputsAreCheckedBeforeAnyWork) {
  fs::create_directory(tmp("x_0001.png"));
  expect_failure({"generate", "-m", fixture("c2i_f32"), "--class", "3", "-t", "1", "-n", "3", "-o",
                  tmp("x.png")},
                 {"-o: cannot write " + tmp("x_0001.png") + ": Is a directory"});
  EXPECT_FALSE(fs::exists(tmp("x_0000.png")));
  fs::create_directory(tmp("h_0002.png"));
  expect_failure({"generate", "-m", fixture("c2i_f32"), "--class", "3", "-t", "1", "-n", "3",
                  "--tokens-out", tmp("t.npy"), "--heatmap-out", tmp("h.png")},
                 {"--heatmap-out: cannot write " + tmp("h_0002.png") + ": Is a directory"});
  EXPECT_FALSE(fs::exists(tmp("t.npy")));
}

}  // namespace
