// A read-only memory mapping of a whole file. Weights are used in place from it.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace tessera {

class MappedFile {
 public:
  // Maps `path`; throws tessera::Error naming the file when it is missing or unreadable.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile() = default;
  std::string path_;
  unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera
