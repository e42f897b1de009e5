// The temporary is a named file created with O_EXCL next to the target, not an O_TMPFILE +
// linkat(): linkat cannot replace an existing target (EEXIST), so overwriting would need a named
// temporary and a rename anyway, and O_TMPFILE is missing on some filesystems (a second code path
// to keep working). A named temporary is one path everywhere; after a crash it is a visible
// ".NAME.XXXXXX.tmp" rather than nothing, which is the price. It is created by open(O_EXCL) with
// mode 0666 rather than mkstemp(), whose 0600 would leave outputs unreadable to the group and
// others where an ordinary open() gives them the umask's permissions.
#include "io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <random>
#include <system_error>
#include <utility>

#include "io/regular_file.h"
#include "tessera/error.h"
#include "tessera/file_io.h"

namespace tessera {

namespace fs = std::filesystem;

namespace {

[[noreturn]] void throw_os(const std::string& path, int err, const std::string& context = "") {
  throw Error("cannot write " + path + ": " + context + std::system_category().message(err));
}

// Where a write to `path` goes, found before anything is created.
struct Target {
  std::string path;       // symlinks resolved
  bool in_place = false;  // exists and is neither a regular file nor a directory
  mode_t mode = 0;        // permission bits of an existing regular file (0: a new file)
};

Target inspect(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  if (path.empty()) throw_os(path, ENOENT);
  if (name.empty() || name == "." || name == "..") throw_os(path, EISDIR);
  Target t;
  t.path = path;
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Write where the link points and keep the link, as a plain open() would.
    std::error_code ec;
    t.path = fs::weakly_canonical(p, ec).string();
    if (ec) throw_os(path, ec.value());
  }
  if (::stat(t.path.c_str(), &st) != 0) {
    // A new file (ENOENT), or a directory part that is not one (ENOTDIR): creating the
    // temporary reports the directory's problem.
    if (errno == ENOENT || errno == ENOTDIR) return t;
    throw_os(path, errno);
  }
  if (S_ISDIR(st.st_mode)) throw_os(path, EISDIR);
  // A read-only file stays unwritten, as with open(): the rename alone would not ask.
  if (::access(t.path.c_str(), W_OK) != 0) throw_os(path, errno);
  if (S_ISREG(st.st_mode))
    t.mode = st.st_mode & 07777;
  else
    t.in_place = true;  // /dev/null, a pipe, a terminal: nothing to rename over
  return t;
}

std::string directory_of(const std::string& target) {
  const std::string d = fs::path(target).parent_path().string();
  return d.empty() ? "." : d;
}

// Creates "DIR/.NAME.XXXXXX.tmp" next to target with O_EXCL; returns the descriptor and sets tmp.
int create_temp(const std::string& path, const std::string& target, std::string& tmp) {
  const fs::path t(target);
  std::string name = t.filename().string();
  if (name.size() > 200) name.resize(200);  // "." + name + ".XXXXXX.tmp" within NAME_MAX
  static const char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng(
      std::random_device{}() ^ (static_cast<uint64_t>(::getpid()) << 32) ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::string suffix(6, 'x');
    for (char& c : suffix) c = kChars[rng() % (sizeof kChars - 1)];
    tmp = (t.parent_path() / ("." + name + "." + suffix + ".tmp")).string();
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) return fd;
    if (errno != EEXIST && errno != EINTR) break;
  }
  const int err = errno;
  tmp.clear();
  throw_os(path, err, "directory " + directory_of(target) + ": ");
}

// Makes the rename itself durable. Best effort: the file is complete and in place whatever this
// returns, so a failure here is no reason to report the write as failed.
void sync_directory(const std::string& target) {
  const int fd = ::open(directory_of(target).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path) {
  const Target t = inspect(path);
  target_ = t.path;
  if (t.in_place) {
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) throw_os(path_, errno);
    return;
  }
  fd_ = create_temp(path_, target_, tmp_);
  // An overwritten file keeps its permissions (best effort: the umask's are a fine fallback).
  if (t.mode != 0) (void)::fchmod(fd_, t.mode);
}

AtomicFile::~AtomicFile() {
  if (!done_) discard();
}

void AtomicFile::write(const void* data, size_t n) {
  if (done_) throw Error("cannot write " + path_ + ": the file is already closed");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    if (w == 0) fail(EIO);  // no progress and no error: never loop forever
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  if (done_) throw Error("cannot write " + path_ + ": the file is already closed");
  // Data before name: without the fsync a crash after the rename could leave an empty target.
  if (!tmp_.empty())
    while (::fsync(fd_) != 0)
      if (errno != EINTR) fail(errno);
  // close() reports late write errors (NFS); after EINTR the descriptor is closed all the same.
  if (::close(std::exchange(fd_, -1)) != 0 && errno != EINTR) fail(errno);
  if (!tmp_.empty()) {
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) fail(errno);
    sync_directory(target_);
  }
  done_ = true;
}

void AtomicFile::fail(int err) {
  discard();
  throw_os(path_, err);
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  done_ = true;
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes);
  f.commit();
}

void check_writable(const std::string& path) {
  const Target t = inspect(path);
  if (t.in_place) return;  // inspect() has checked it is writable
  std::string tmp;
  ::close(create_temp(path, t.path, tmp));
  ::unlink(tmp.c_str());
}

std::string read_file(const std::string& path, size_t max_bytes) {
  return read_small_file(path, max_bytes);
}

}  // namespace tessera
