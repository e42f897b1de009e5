#include "io/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "tessera/error.h"

namespace tessera {

namespace {

// What a non-regular file is, for the message.
const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a regular file";
  if (S_ISCHR(mode)) return "is a character device, not a regular file";
  if (S_ISBLK(mode)) return "is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  return "is not a regular file";
}

std::string errno_text(int err) {
  return std::strerror(err);
}

}  // namespace

RegularFile::RegularFile(int fd, size_t size, std::string path)
    : fd_(fd), size_(size), path_(std::move(path)) {}

RegularFile::RegularFile(RegularFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

RegularFile& RegularFile::operator=(RegularFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

RegularFile RegularFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. O_NOCTTY: a
  // terminal device must not become the controlling terminal.
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    const int err = errno;
    // A socket cannot be opened at all (ENXIO); say what it is rather than "No such device".
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
      throw Error(path + ": " + kind_of(st.st_mode));
    throw Error(path + ": cannot open (" + errno_text(err) + ")");
  }
  RegularFile f(fd, 0, path);
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(path + ": cannot stat (" + errno_text(errno) + ")");
  if (!S_ISREG(st.st_mode)) throw Error(path + ": " + kind_of(st.st_mode));
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw Error(path + ": cannot open (" + errno_text(errno) + ")");
  f.size_ = static_cast<size_t>(st.st_size);
  return f;
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  const RegularFile f = RegularFile::open(path);
  const auto too_large = [&](const std::string& size) {
    return Error(path + ": file too large (" + size + " bytes; at most " +
                 std::to_string(max_bytes) + " expected)");
  };
  if (f.size() > max_bytes) throw too_large(std::to_string(f.size()));
  // Read to the end rather than trusting st_size, which can be 0 (procfs) or change; one byte
  // beyond the limit tells a file that grew too large.
  std::string out(f.size() < max_bytes ? f.size() + 1 : max_bytes + 1, '\0');
  size_t got = 0;
  for (;;) {
    if (got == out.size()) {
      if (out.size() > max_bytes) throw too_large("more than " + std::to_string(max_bytes));
      out.resize(std::min(max_bytes + 1, out.size() * 2 + 4096));
    }
    const ssize_t n = ::read(f.fd(), out.data() + got, out.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw Error(path + ": read error (" + errno_text(errno) + ")");
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  out.resize(got);
  return out;
}

}  // namespace tessera
