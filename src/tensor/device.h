// Which backend a model runs on: the CPU or one CUDA device. The one factory of backends: every
// caller outside the CPU backend itself gets its backend here, so a device is chosen in one place.
#pragma once

#include <string>

#include "tensor/backend.h"

namespace tessera {

struct Device {
  enum class Kind { Cpu, Cuda };
  Kind kind = Kind::Cpu;
  int ordinal = 0;  // CUDA only

  static Device cpu() { return {}; }
  static Device cuda(int n) { return {Kind::Cuda, n}; }
  // "cpu", "cuda" (= cuda:0) or "cuda:N"; throws ParameterError("device") naming the bad text
  // and the accepted forms.
  static Device parse(const std::string& text);
  std::string str() const;  // "cpu" or "cuda:N"
  bool operator==(const Device&) const = default;
};

// The process-wide backend of `device`, made on first use (thread-safe). For CUDA, throws Error
// before any work when the build has no CUDA backend, there is no device, or the ordinal is out
// of range, with the numbers ("this machine has 1 CUDA device (cuda:0)").
Backend& backend_for(const Device& device);

// The same for the device as a user wrote it (LoadOptions::device, --device): every error is a
// ParameterError("device") that starts with that text ("{device} cuda:3: this machine has ...").
Backend& backend_for(const std::string& device);

}  // namespace tessera
