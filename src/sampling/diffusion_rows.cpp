#include "sampling/diffusion_rows.h"

#include "tessera/error.h"
#if defined(TESSERA_HAVE_CUDA)
#include "sampling/cuda/diffusion_kernels.h"
#endif

namespace tessera {

void diffusion_step_rows(Backend& be, const Tensor& out, int n, int d, const DiffusionStep& step,
                         const Tensor& rows, Tensor& x, Tensor& mean, Tensor& log_var,
                         Tensor& sum_log_std, Tensor& x_in) {
  const int64_t halves = step.guided ? 2 : 1, nd = static_cast<int64_t>(n) * d;
  check(n >= 0 && d >= 1 && out.dtype == DType::F32 && out.numel() >= halves * 2 * nd,
        "internal: diffusion_step_rows head output shape");
  check(rows.nbytes() >= static_cast<size_t>(n) * sizeof(DiffusionRowNoise) &&
            sum_log_std.nbytes() >= static_cast<size_t>(nd) * sizeof(double),
        "internal: diffusion_step_rows rows or sums");
  for (const Tensor* t : {&x, &mean, &log_var})
    check(t->dtype == DType::F32 && t->numel() >= nd, "internal: diffusion_step_rows state shape");
  check(x_in.dtype == DType::F32 && x_in.numel() >= halves * nd,
        "internal: diffusion_step_rows next input shape");
  if (nd == 0) return;
  const auto* r = static_cast<const DiffusionRowNoise*>(rows.data);
  auto* sums = static_cast<double*>(sum_log_std.data);
  if (be.host_memory()) {
    for (int64_t e = 0; e < nd; ++e)
      diffusion_step_element(out.ptr<float>(), n, d, step, r, e, x.ptr<float>(), mean.ptr<float>(),
                             log_var.ptr<float>(), sums, x_in.ptr<float>());
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_diffusion_step(out.ptr<float>(), n, d, step, r, x.ptr<float>(), mean.ptr<float>(),
                        log_var.ptr<float>(), sums, x_in.ptr<float>(),
                        static_cast<CUstream_st*>(be.native_stream()));
#else
  throw Error("internal: diffusion steps on " + be.name() + " in a build without CUDA");
#endif
}

}  // namespace tessera
