// The bytes of a whole file, read-only: a memory mapping of the file (weights are used in place
// from it), or a copy of bytes held in memory (parsing a buffer as if it were a file: tests and
// fuzzing).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace tessera {

class MappedFile {
 public:
  // Maps `path`, a regular file (io/regular_file.h: opening never blocks). Throws tessera::Error
  // "PATH: problem" when it is missing, unreadable or not a regular file.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  // A copy of size bytes at data, named `name` in messages.
  static std::shared_ptr<MappedFile> from_bytes(const std::string& name, const void* data,
                                                size_t size);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Drops this process's pages of [p, p + bytes) that lie wholly inside it (MADV_DONTNEED): for
  // a range read once and copied (weights a backend packed or uploaded), so the copy alone stays
  // resident. A later read maps the file's pages again; a heap copy (from_bytes) is kept.
  void release(const void* p, size_t bytes) const;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // data_ is a mapping (else a new[] copy, or null when empty)
};

}  // namespace tessera
