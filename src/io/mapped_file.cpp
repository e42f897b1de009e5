#include "io/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/regular_file.h"
#include "tessera/error.h"

namespace tessera {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  const RegularFile file = RegularFile::open(path);
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = file.size();
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
    if (p == MAP_FAILED) throw Error(path + ": cannot map (" + std::strerror(errno) + ")");
    f->data_ = static_cast<unsigned char*>(p);
    f->mapped_ = true;
    // Weights are streamed front to back every token: ask for read-ahead and large pages.
    madvise(p, f->size_, MADV_HUGEPAGE);
    madvise(p, f->size_, MADV_WILLNEED);
  }
  return f;
}

std::shared_ptr<MappedFile> MappedFile::from_bytes(const std::string& name, const void* data,
                                                   size_t size) {
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = name;
  f->size_ = size;
  // Exactly `size` bytes on the heap, so that a sanitizer catches any read past the end.
  if (size > 0) {
    f->data_ = new unsigned char[size];
    std::memcpy(f->data_, data, size);
  }
  return f;
}

void MappedFile::release(const void* p, size_t bytes) const {
  const auto* begin = static_cast<const unsigned char*>(p);
  if (!mapped_ || begin < data_ || bytes > size_ || begin > data_ + (size_ - bytes)) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(begin) + bytes) / page * page;
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (!data_) return;
  if (mapped_)
    munmap(data_, size_);
  else
    delete[] data_;
}

}  // namespace tessera
