#include "speculative/verify_images.h"

#include "speculative/drafters/jacobi_carry.h"
#include "tessera/error.h"

#if defined(TESSERA_HAVE_CUDA)
#include "speculative/cuda/verify_kernels.h"
#endif

namespace tessera::speculative {

void verify_images(Backend& be, const Tensor& p, const Tensor* q, const Tensor& nodes,
                   const Tensor& images, int n_images, int width, bool greedy, Tensor& scratch,
                   Tensor& verdicts, Tensor* carried) {
  const int V = static_cast<int>(p.dim(-1));
  const int64_t n = n_images;
  check(p.dtype == DType::F32 && p.numel() >= n * (width + 1) * V,
        "internal: verify_images target rows");
  check(!q || (q->dtype == DType::F32 && q->dim(-1) == V && q->numel() >= n * width * V),
        "internal: verify_images draft rows");
  check(nodes.nbytes() >= static_cast<size_t>(n * width) * sizeof(WalkNode),
        "internal: verify_images nodes");
  check(images.nbytes() >= static_cast<size_t>(n) * sizeof(RoundImage) &&
            verdicts.nbytes() >= static_cast<size_t>(n) * sizeof(DraftVerdict),
        "internal: verify_images images or verdicts");
  check(scratch.dtype == DType::F32 && scratch.numel() >= n * verify_scratch(V),
        "internal: verify_images scratch");
  check(!carried || (carried->dtype == DType::I32 && carried->numel() >= n * width),
        "internal: verify_images carry-over draws");
  if (n_images == 0) return;
  if (be.host_memory()) {
    const auto* im = static_cast<const RoundImage*>(images.data);
    const auto* walk = static_cast<const WalkNode*>(nodes.data);
    auto* out = static_cast<DraftVerdict*>(verdicts.data);
    for (int i = 0; i < n_images; ++i) {
      check(im[i].drafts >= 0 && im[i].drafts <= width, "internal: a draft wider than the round");
      check(q || im[i].one_hot, "internal: verify_images without the drafts' distributions");
      out[i] = verify_rows(
          im[i].rule, p.ptr<float>() + i * (width + 1) * static_cast<int64_t>(V),
          im[i].one_hot ? nullptr : q->ptr<float>() + i * width * static_cast<int64_t>(V),
          walk + i * static_cast<int64_t>(width), im[i].drafts, im[i].draft_len, V, greedy,
          im[i].seed, im[i].image_index, im[i].base_token, im[i].round,
          scratch.ptr<float>() + i * verify_scratch(V));
      if (!carried || !im[i].carry) continue;
      for (int c = 0; c < im[i].drafts; ++c)
        carried->ptr<int32_t>()[i * width + c] =
            jacobi_carry_token(p.ptr<float>() + (i * (width + 1) + c + 1) * static_cast<int64_t>(V),
                               V, greedy, im[i].seed, im[i].image_index,
                               im[i].base_token + static_cast<uint32_t>(c + 1), im[i].round);
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_verify_images(
      p.ptr<float>(), q ? q->ptr<float>() : nullptr, static_cast<const WalkNode*>(nodes.data),
      static_cast<const RoundImage*>(images.data), n_images, width, V, greedy, scratch.ptr<float>(),
      static_cast<DraftVerdict*>(verdicts.data), carried ? carried->ptr<int32_t>() : nullptr,
      static_cast<CUstream_st*>(be.native_stream()));
#else
  (void)greedy;
  throw Error("internal: verifying on " + be.name() + " in a build without CUDA");
#endif
}

}  // namespace tessera::speculative
