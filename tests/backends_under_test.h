// The backends that tessera_backend_tests compares with the CPU backend (the reference), in the
// spirit of ggml's test-backend-ops: "cpu2", a second, independent CpuBackend whose results must
// equal the reference's bits (the harness's self-check, run in every build), and "cuda0", the
// first CUDA device when this build and machine have one. Tests take the backend's name as their
// parameter; the comparison of outputs and its tolerances are here too.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"
#include "tensor/cuda/cuda_backend.h"

namespace tessera::testing_backends {

inline const std::vector<std::string> kBackendNames = {"cpu2", "cuda0"};

// The backend under test, made once per process (a device context costs seconds to start).
// Returns null with `why` set when it cannot exist here.
inline Backend* backend_named(const std::string& name, std::string& why) {
  if (name == "cpu2") {
    static CpuBackend cpu2;
    return &cpu2;
  }
  // Never destroyed: freeing device memory after the CUDA runtime has unloaded at exit fails.
  static Backend* cuda = nullptr;
  static std::string cuda_why;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (!cuda_devices(&cuda_why).empty()) cuda = make_cuda_backend(0).release();
  }
  why = cuda_why;
  return cuda;
}

// |got - want| <= abs + rel * scale. Element-wise ops scale by |want[i]|; ops whose outputs are
// sums (normwise) scale by the largest |want| of the output, since one output can cancel to ~0
// while its rounding error is proportional to the terms.
struct Tol {
  double rel = 0.0, abs = 0.0;
  bool normwise = false;
};

// Whether results must be bit-equal to the reference's (the same code, so any difference is a bug
// in the harness: an input uploaded wrongly, a tensor read from the wrong backend).
inline bool exact_backend(const std::string& name) {
  return name.rfind("cpu", 0) == 0;
}

inline ::testing::AssertionResult compare_outputs(const std::string& op, std::span<const float> got,
                                                  std::span<const float> want, Tol tol,
                                                  bool exact) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << op << ": " << got.size() << " values, expected " << want.size();
  double top = 0.0;
  if (tol.normwise)
    for (float w : want)
      if (std::isfinite(w)) top = std::max(top, static_cast<double>(std::fabs(w)));
  size_t bad = 0;
  std::ostringstream msg;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    bool ok;
    double bound = 0.0;
    if (exact) {
      ok = std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    } else if (!std::isfinite(w)) {
      ok = std::isnan(w) ? std::isnan(g) : g == w;
    } else {
      bound = tol.abs + tol.rel * (tol.normwise ? top : std::fabs(w));
      ok = std::fabs(g - w) <= bound;  // false for a NaN got
    }
    if (!ok && bad++ < 5)
      msg << "\n  [" << i << "] cpu " << w << ", got " << g << " (|diff| " << std::fabs(g - w)
          << (exact ? ", bits differ" : ", bound " + std::to_string(bound)) << ")";
  }
  if (bad)
    return ::testing::AssertionFailure()
           << op << ": " << bad << " of " << got.size() << " values off" << msg.str();
  return ::testing::AssertionSuccess();
}

// A test over one backend under test: backend() is it, ref() the CPU reference. The "cuda0"
// instances skip with "no GPU: <why>" where there is none (tests/check_skips.py accepts that).
class BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    under_test_ = backend_named(GetParam(), why);
    if (!under_test_) GTEST_SKIP() << "no GPU: " << why;
  }
  Backend& backend() { return *under_test_; }
  static Backend& ref() { return cpu_backend(); }
  bool exact() const { return exact_backend(GetParam()); }
  ::testing::AssertionResult same(const std::string& op, std::span<const float> got,
                                  std::span<const float> want, Tol tol) const {
    return compare_outputs(op, got, want, tol, exact());
  }

 private:
  Backend* under_test_ = nullptr;
};

inline std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) {
  return info.param;
}

}  // namespace tessera::testing_backends
