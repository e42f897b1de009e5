// An output file written whole or not at all (tessera/file_io.h): bytes are streamed into a
// temporary "DIR/.NAME.XXXXXX.tmp" next to the target, which commit() fsyncs and renames over the
// target. Writers that produce their bytes in pieces (npy, safetensors) use this class directly,
// so that a large tensor is not copied into one buffer first.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace tessera {

class AtomicFile {
 public:
  // Creates the temporary. Throws tessera::Error "cannot write PATH: REASON" when the directory
  // is missing or not writable, or path is a directory or a read-only file.
  explicit AtomicFile(const std::string& path);
  // Removes the temporary unless commit() succeeded: an exception between the writes leaves
  // nothing behind.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Writes all n bytes (retrying short writes and EINTR). On failure the temporary is removed
  // and an Error naming the target and the OS error is thrown; the object is then spent.
  void write(const void* data, size_t n);
  void write(std::string_view s) { write(s.data(), s.size()); }

  // fsync, close, rename over the target, fsync the directory. Throws like write(); the target is
  // replaced only when everything before the rename succeeded.
  void commit();

  const std::string& path() const { return path_; }

 private:
  [[noreturn]] void fail(int err);
  void discard() noexcept;

  std::string path_;    // as given: the name in messages
  std::string target_;  // where the bytes go (a symlink's destination: the link stays a link)
  std::string tmp_;     // empty: writing the target in place (not a regular file, e.g. /dev/null)
  int fd_ = -1;
  bool done_ = false;
};

}  // namespace tessera
