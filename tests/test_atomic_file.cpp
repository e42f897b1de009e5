// The atomic writer (src/io/atomic_file.h, tessera/file_io.h) and the writers over it (npy,
// safetensors, PNG): a file is written whole or not at all. A failed write throws an Error naming
// the target and the OS reason and leaves nothing new under the target name, a previous file
// byte-identical, and no temporary in the directory.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "io/atomic_file.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "tessera/error.h"
#include "tessera/file_io.h"
#include "tessera/image_io.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_plain(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// The message of the tessera::Error that fn throws ("" when it throws none).
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Lowers the file size limit (RLIMIT_FSIZE) with SIGXFSZ ignored, so that a write past it fails
// with EFBIG ("File too large") instead of killing the process, as a full disk fails with ENOSPC.
// Restores both on destruction; keep the scope to the write (gtest's own output may be a file).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &r);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit old_{};
  sighandler_t old_handler_ = SIG_DFL;
};

class AtomicFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("tessera_atomic_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // The names in the directory, sorted.
  std::vector<std::string> entries(const fs::path& dir) const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
  std::vector<std::string> entries() const { return entries(dir_); }

  fs::path dir_;
};

TEST_F(AtomicFileTest, WritesANewFileWithTheUmasksPermissions) {
  write_file_atomic(path("out.bin"), "hello");
  EXPECT_EQ(read_all(path("out.bin")), "hello");
  EXPECT_EQ(entries(), std::vector<std::string>{"out.bin"});  // no temporary left
  const mode_t mask = ::umask(0);
  ::umask(mask);
  struct stat st {};
  ASSERT_EQ(::stat(path("out.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0666 & ~mask);  // not mkstemp's 0600
}

TEST_F(AtomicFileTest, OverwriteReplacesTheWholeFileAndKeepsItsPermissions) {
  write_plain(path("out.bin"), std::string(10000, 'x'));
  ASSERT_EQ(::chmod(path("out.bin").c_str(), 0640), 0);
  write_file_atomic(path("out.bin"), "short");
  EXPECT_EQ(read_all(path("out.bin")), "short");  // nothing of the longer file left behind
  EXPECT_EQ(entries(), std::vector<std::string>{"out.bin"});
  struct stat st {};
  ASSERT_EQ(::stat(path("out.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u);
}

TEST_F(AtomicFileTest, MissingDirectoryNamesTheTargetAndTheReason) {
  const std::string p = path("no_dir/out.bin");
  EXPECT_EQ(error_of([&] { write_file_atomic(p, "x"); }),
            "cannot write " + p + ": directory " + path("no_dir") + ": No such file or directory");
  EXPECT_EQ(error_of([&] { check_writable(p); }), error_of([&] { write_file_atomic(p, "x"); }));
  EXPECT_TRUE(entries().empty());
}

TEST_F(AtomicFileTest, DirectoryPartThatIsAFile) {
  write_plain(path("file"), "data");
  const std::string p = path("file/out.bin");
  EXPECT_EQ(error_of([&] { write_file_atomic(p, "x"); }),
            "cannot write " + p + ": directory " + path("file") + ": Not a directory");
  EXPECT_EQ(error_of([&] { check_writable(p); }), error_of([&] { write_file_atomic(p, "x"); }));
  EXPECT_EQ(read_all(path("file")), "data");
}

TEST_F(AtomicFileTest, TargetThatIsADirectory) {
  fs::create_directory(path("sub"));
  for (const std::string& p : {path("sub"), path("sub") + "/"}) {
    EXPECT_EQ(error_of([&] { write_file_atomic(p, "x"); }),
              "cannot write " + p + ": Is a directory");
    EXPECT_EQ(error_of([&] { check_writable(p); }), "cannot write " + p + ": Is a directory");
  }
  EXPECT_TRUE(fs::is_directory(path("sub")));
  EXPECT_TRUE(entries(path("sub")).empty());
  EXPECT_EQ(entries(), std::vector<std::string>{"sub"});
}

// The directory cannot be written: owner write permission removed, and, for root (who ignores
// permissions), the write done by a child process that has become nobody (uid 65534).
TEST_F(AtomicFileTest, UnwritableDirectory) {
  write_plain(path("old.bin"), "previous");
  ASSERT_EQ(::chmod(dir_.c_str(), 0555), 0);
  const std::string fresh = path("new.bin"), old = path("old.bin");
  // Each attempt's error message, separated by '\n'.
  auto attempts = [&] {
    std::string out;
    for (const std::string& p : {fresh, old}) {
      out += error_of([&] { check_writable(p); }) + "\n";
      out += error_of([&] { write_file_atomic(p, "new contents"); }) + "\n";
    }
    return out;
  };
  std::string got;
  if (::geteuid() != 0) {
    got = attempts();
  } else {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
      const std::string out = attempts();
      const ssize_t w = ::write(fds[1], out.data(), out.size());
      ::_exit(w == static_cast<ssize_t>(out.size()) ? 0 : 4);
    }
    ::close(fds[1]);
    char buf[4096];
    for (ssize_t r; (r = ::read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, r);
    ::close(fds[0]);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status));
    if (WEXITSTATUS(status) == 3)
      GTEST_SKIP() << "cannot switch to uid 65534 to drop root's rights";
    ASSERT_EQ(WEXITSTATUS(status), 0);
  }
  // The new file: the directory refuses it. The old one: the file refuses (nobody) or, when
  // its owner may write it, the directory does.
  const std::string dir_error = ": directory " + dir_.string() + ": Permission denied";
  std::vector<std::string> lines;
  for (size_t b = 0, e; (e = got.find('\n', b)) != std::string::npos; b = e + 1)
    lines.push_back(got.substr(b, e - b));
  ASSERT_EQ(lines.size(), 4u) << got;
  EXPECT_EQ(lines[0], "cannot write " + fresh + dir_error);
  EXPECT_EQ(lines[1], "cannot write " + fresh + dir_error);
  for (const std::string& line : {lines[2], lines[3]})
    EXPECT_TRUE(line == "cannot write " + old + ": Permission denied" ||
                line == "cannot write " + old + dir_error)
        << line;
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  EXPECT_EQ(entries(), std::vector<std::string>{"old.bin"});
  EXPECT_EQ(read_all(old), "previous");
}

TEST_F(AtomicFileTest, CheckWritableLeavesNothingBehind) {
  EXPECT_NO_THROW(check_writable(path("out.bin")));
  write_plain(path("old.bin"), "previous");
  EXPECT_NO_THROW(check_writable(path("old.bin")));
  EXPECT_EQ(entries(), std::vector<std::string>{"old.bin"});
  EXPECT_EQ(read_all(path("old.bin")), "previous");
}

// A file size limit makes the write fail part-way, after some bytes reached the temporary: every
// writer must throw "File too large" naming its target and leave no torn file.
TEST_F(AtomicFileTest, WriteFailurePartWayLeavesNoTornFile) {
  const std::vector<float> values(16384, 0.5f);  // 64 KiB of data in every format
  const std::vector<int64_t> square = {128, 128};
  std::vector<uint8_t> rgb(128 * 128 * 3);
  std::mt19937 noise(7);  // noise: the PNG cannot compress below the limit
  for (auto& v : rgb) v = static_cast<uint8_t>(noise() >> 24);
  std::map<std::string, HostTensor> tensors;
  tensors["w"] = HostTensor{DType::F32, {16384}, std::vector<unsigned char>(65536, 7)};
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> writers = {
      {"raw.bin", [](const std::string& p) { write_file_atomic(p, std::string(65536, 'r')); }},
      {"arr.npy", [&](const std::string& p) { write_npy(p, square, values); }},
      {"arr_f32.npy",
       [&](const std::string& p) { write_npy(p, DType::F32, {16384}, values.data()); }},
      {"w.safetensors", [&](const std::string& p) { write_safetensors(p, tensors); }},
      {"img.png", [&](const std::string& p) { write_png(p, rgb.data(), 128, 128); }},
  };
  for (const auto& [name, write] : writers) {
    SCOPED_TRACE(name);
    for (const bool existed : {false, true}) {
      if (existed) write_plain(path(name), "previous contents of " + name);
      std::string err;
      {
        FileSizeLimit limit(16384);
        err = error_of([&] { write(path(name)); });
      }
      EXPECT_EQ(err, "cannot write " + path(name) + ": File too large");
      if (existed)
        EXPECT_EQ(read_all(path(name)), "previous contents of " + name);
      else
        EXPECT_FALSE(fs::exists(path(name)));
      EXPECT_EQ(entries(), existed ? std::vector<std::string>{name} : std::vector<std::string>{});
    }
    fs::remove(path(name));
    write(path(name));  // without the limit the same write succeeds
    EXPECT_GT(fs::file_size(path(name)), 16384u);
    fs::remove(path(name));
  }
}

TEST_F(AtomicFileTest, AbandonedWriteLeavesNothing) {
  write_plain(path("old.bin"), "previous");
  {
    AtomicFile f(path("new.bin"));
    f.write("partial");
  }  // destroyed without commit(), as when an exception unwinds between writes
  {
    AtomicFile f(path("old.bin"));
    f.write("partial");
  }
  EXPECT_EQ(entries(), std::vector<std::string>{"old.bin"});
  EXPECT_EQ(read_all(path("old.bin")), "previous");
}

TEST_F(AtomicFileTest, WritesThroughASymlinkAndKeepsIt) {
  fs::create_directory(path("real"));
  write_plain(path("real/target.bin"), "previous");
  fs::create_symlink(path("real/target.bin"), path("link.bin"));
  write_file_atomic(path("link.bin"), "new");
  EXPECT_TRUE(fs::is_symlink(path("link.bin")));
  EXPECT_EQ(read_all(path("real/target.bin")), "new");
  EXPECT_EQ(entries(path("real")), std::vector<std::string>{"target.bin"});
}

// Nothing to rename over: a device is written in place (a rename would replace /dev/null).
TEST_F(AtomicFileTest, DeviceIsWrittenInPlace) {
  EXPECT_NO_THROW(write_file_atomic("/dev/null", "discarded"));
  EXPECT_NO_THROW(check_writable("/dev/null"));
  struct stat st {};
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

// Readers racing two writers of the same file see one version or the other, whole.
TEST_F(AtomicFileTest, ConcurrentReadersNeverSeeATornFile) {
  const std::string a(100000, 'a'), b(60000, 'b');
  write_file_atomic(path("f.bin"), a);
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (const std::string* s : {&a, &b})
    writers.emplace_back([&, s] {
      for (int i = 0; i < 10; ++i) write_file_atomic(path("f.bin"), *s);
    });
  int torn = 0, reads = 0;
  std::thread reader([&] {
    while (!stop) {
      const std::string got = read_all(path("f.bin"));
      torn += got != a && got != b;
      ++reads;
    }
  });
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  EXPECT_EQ(torn, 0) << "of " << reads << " reads";
  EXPECT_EQ(entries(), std::vector<std::string>{"f.bin"});
}

}  // namespace
