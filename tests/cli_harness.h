// The harness of the CLI tests (test_cli_errors.cpp, test_cli_output.cpp): the tessera binary run
// through the shell from a scratch directory per test, and the check of its one-line errors.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "tessera/image_io.h"

namespace fs = std::filesystem;

namespace {

const fs::path kFixtures = fs::path(TESSERA_FIXTURES) / "llamagen";

inline std::string fixture(const std::string& name) {
  return (kFixtures / name).string();
}

inline std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A PNG text chunk's value ("" when absent), e.g. the "parameters" tessera stores.
inline std::string png_text(const std::string& path, const std::string& key) {
  int w = 0, h = 0;
  std::vector<std::pair<std::string, std::string>> text;
  tessera::read_png(path, w, h, &text);
  for (const auto& [k, v] : text)
    if (k == key) return v;
  return "";
}

inline void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

// Runs the CLI in the background, stderr to a file; returns its pid.
inline pid_t spawn(const std::vector<std::string>& args, const std::string& err_path) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, STDERR_FILENO);
    std::vector<char*> argv = {const_cast<char*>(TESSERA_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(TESSERA_BINARY, argv.data());
    _exit(127);
  }
  return pid;
}

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CliResult {
  bool exited = false;  // false: killed by a signal (a crash is never an acceptable answer)
  int code = -1;
  std::string out, err;
};

// Every test gets its own scratch directory, removed afterwards.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = info->name();  // "Test/Param" for parameterized tests
    std::replace(name.begin(), name.end(), '/', '_');
    tmp_ = fs::temp_directory_path() / ("tessera_cli_" + std::to_string(::getpid()) + "_" +
                                        std::to_string(counter++) + "_" + name);
    fs::remove_all(tmp_);
    fs::create_directories(tmp_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(tmp_, ec);
  }

  std::string tmp(const std::string& name) const { return (tmp_ / name).string(); }

  // prefix: shell words before the binary, e.g. "cd DIR &&" or "VAR=value".
  CliResult run(const std::vector<std::string>& args, const std::string& prefix = "") const {
    const fs::path out = tmp_ / "cli.stdout", err = tmp_ / "cli.stderr";
    std::vector<std::string> words = {prefix, shell_quote(TESSERA_BINARY)};
    for (const auto& a : args) words.push_back(shell_quote(a));
    words.insert(words.end(),
                 {">", shell_quote(out.string()), "2>", shell_quote(err.string()), "</dev/null"});
    std::string cmd;
    for (const auto& w : words) cmd.append(w).append(" ");
    const int st = std::system(cmd.c_str());
    CliResult r;
    r.exited = st != -1 && WIFEXITED(st);
    r.code = r.exited ? WEXITSTATUS(st) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    fs::remove(out);
    fs::remove(err);
    return r;
  }

  // The command must fail cleanly with one "error: ..." line mentioning every needle.
  void expect_error(const std::vector<std::string>& args,
                    const std::vector<std::string>& needles) const {
    std::string shown;
    for (const auto& a : args) shown += " " + a;
    SCOPED_TRACE("tessera" + shown);
    const CliResult r = run(args);
    ASSERT_TRUE(r.exited) << "killed by a signal; stderr: " << r.err;
    EXPECT_NE(r.code, 0) << "stderr: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "stderr: " << r.err;
    EXPECT_TRUE(!r.err.empty() && r.err.back() == '\n') << "stderr: " << r.err;
    EXPECT_EQ(r.err.rfind("error:", 0), 0u) << "stderr: " << r.err;
    for (const auto& n : needles)
      EXPECT_NE(r.err.find(n), std::string::npos) << "expected '" << n << "' in: " << r.err;
  }

  // A copy of a fixture model directory that a test may corrupt.
  fs::path copy_model(const std::string& name) const {
    const fs::path dst = tmp_ / name;
    fs::copy(kFixtures / name, dst, fs::copy_options::recursive);
    return dst;
  }

  static void edit_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(slurp(dir / "config.json"));
    edit(j);
    spit(dir / "config.json", j.dump(2));
  }

  // Rewrites DIR/gpt.safetensors with `edit` applied to its tensors.
  static void edit_weights(
      const fs::path& dir,
      const std::function<void(std::map<std::string, tessera::HostTensor>&)>& edit) {
    const std::string path = (dir / "gpt.safetensors").string();
    std::map<std::string, tessera::HostTensor> tensors;
    {
      const tessera::SafeTensorsFile f = tessera::SafeTensorsFile::open(path);
      for (const auto& [name, info] : f.tensors()) {
        const auto* p = static_cast<const unsigned char*>(info.data);
        tensors[name] = tessera::HostTensor{info.dtype, info.shape, {p, p + info.nbytes}};
      }
    }
    edit(tensors);
    tessera::write_safetensors(path, tensors);
  }

  // Arguments of a cheap command that loads DIR's transformer (and nothing else).
  std::vector<std::string> tokens_only(const fs::path& dir) const {
    return {"generate", "-m", dir.string(), "--class", "3", "--tokens-out", tmp("t.npy")};
  }

  fs::path tmp_;
};

}  // namespace
