// Reader for .safetensors files (memory-mapped) and a small writer for tests and tools.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "tensor/tensor.h"

namespace tessera {

struct SafeTensorInfo {
  DType dtype;
  Shape shape;
  // Inside the mapping. Not necessarily aligned to the dtype: a file need not pad between
  // tensors (read through memcpy, or copy, before using it as typed values).
  const void* data;
  size_t nbytes;
};

class SafeTensorsFile {
 public:
  // Maps and validates the header: every entry's dtype, shape and byte range. Throws an Error
  // naming the file and the problem (truncated file, corrupt header, bad offsets, ...).
  static SafeTensorsFile open(const std::string& path);
  // Validates the bytes of a safetensors file as open() does; errors name file->path(). The
  // header must be one JSON object without duplicate keys (at most 100 MiB); each tensor has a
  // supported dtype, at most kMaxRank dimensions, and a byte range that matches its shape, lies
  // inside the data and overlaps no other tensor's; "__metadata__" maps strings to strings.
  static SafeTensorsFile parse(std::shared_ptr<MappedFile> file);
  static constexpr size_t kMaxRank = 8;
  static constexpr size_t kMaxHeaderBytes = size_t{100} << 20;

  const std::string& path() const { return file_->path(); }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafeTensorInfo& get(const std::string& name) const;  // throws naming the tensor
  // A float tensor (f32, f16 or bf16) converted to f32 host values; throws naming the tensor
  // when it is missing or not a float tensor.
  std::vector<float> read_f32(const std::string& name) const;
  const std::map<std::string, SafeTensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::shared_ptr<MappedFile> mapping() const { return file_; }

 private:
  std::shared_ptr<MappedFile> file_;
  std::map<std::string, SafeTensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// The file format's name of a dtype: "F32", "F16", "BF16", ...
std::string safetensors_dtype_name(DType t);

// Writes host tensors (name -> dtype, shape, bytes) as a safetensors file, atomically
// (safetensors_writer.cpp): a failed write leaves no file, or the previous one untouched.
struct HostTensor {
  DType dtype;
  Shape shape;
  std::vector<unsigned char> bytes;
};
void write_safetensors(const std::string& path, const std::map<std::string, HostTensor>& tensors);

}  // namespace tessera
