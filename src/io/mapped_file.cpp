#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/error.h"

namespace tessera {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot read " + path + ": not a regular file");
  }
  std::shared_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      ::close(fd);
      throw Error("cannot map " + path + ": " + std::strerror(errno));
    }
    f->data_ = static_cast<unsigned char*>(p);
    // Weights are streamed front to back every token: ask for read-ahead and large pages.
    madvise(p, f->size_, MADV_HUGEPAGE);
    madvise(p, f->size_, MADV_WILLNEED);
  }
  ::close(fd);
  return f;
}

MappedFile::~MappedFile() {
  if (data_) munmap(data_, size_);
}

}  // namespace tessera
