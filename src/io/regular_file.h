// Opening the files tessera reads. Only regular files are accepted, and opening never blocks: a
// FIFO or a device named as a model file would otherwise hang open() or read() forever.
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

// A read-only file descriptor of a regular file, closed on destruction.
class RegularFile {
 public:
  // Opens PATH without blocking, refuses anything that is not a regular file and returns it in
  // blocking mode. Throws tessera::Error "PATH: problem" ("cannot open (No such file or
  // directory)", "is a directory", "is a FIFO, not a regular file", ...).
  static RegularFile open(const std::string& path);

  RegularFile(RegularFile&& other) noexcept;
  RegularFile& operator=(RegularFile&& other) noexcept;
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  ~RegularFile();

  int fd() const { return fd_; }
  size_t size() const { return size_; }  // at open time
  const std::string& path() const { return path_; }

 private:
  RegularFile(int fd, size_t size, std::string path);
  int fd_ = -1;
  size_t size_ = 0;
  std::string path_;
};

// The whole content of PATH, a regular file of at most max_bytes bytes. Throws tessera::Error
// "PATH: problem" when it cannot be opened or read, is not a regular file, or is larger.
std::string read_small_file(const std::string& path, size_t max_bytes);

}  // namespace tessera
