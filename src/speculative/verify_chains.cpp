#include "speculative/verify_chains.h"

#include "tessera/error.h"

#if defined(TESSERA_HAVE_CUDA)
#include "speculative/cuda/verify_kernels.h"
#endif

namespace tessera::speculative {

void verify_chains(Backend& be, const Tensor& p, const Tensor* q, const Tensor& tokens,
                   const Tensor& images, int n_images, int width, bool greedy, Tensor& scratch,
                   Tensor& verdicts) {
  const int V = static_cast<int>(p.dim(-1));
  const int64_t n = n_images;
  check(p.dtype == DType::F32 && p.numel() >= n * (width + 1) * V,
        "internal: verify_chains target rows");
  check(!q || (q->dtype == DType::F32 && q->dim(-1) == V && q->numel() >= n * width * V),
        "internal: verify_chains draft rows");
  check(tokens.dtype == DType::I32 && tokens.numel() >= n * width,
        "internal: verify_chains tokens");
  check(images.nbytes() >= static_cast<size_t>(n) * sizeof(ChainRoundImage) &&
            verdicts.nbytes() >= static_cast<size_t>(n) * sizeof(ChainVerdict),
        "internal: verify_chains images or verdicts");
  check(scratch.dtype == DType::F32 && scratch.numel() >= n * V, "internal: verify_chains scratch");
  if (n_images == 0) return;
  if (be.host_memory()) {
    const auto* im = static_cast<const ChainRoundImage*>(images.data);
    auto* out = static_cast<ChainVerdict*>(verdicts.data);
    for (int i = 0; i < n_images; ++i) {
      check(im[i].drafts >= 0 && im[i].drafts <= width, "internal: a chain longer than the round");
      check(q || im[i].one_hot, "internal: verify_chains without the drafts' distributions");
      out[i] = verify_chain(
          im[i].rule, p.ptr<float>() + i * (width + 1) * static_cast<int64_t>(V),
          im[i].one_hot ? nullptr : q->ptr<float>() + i * width * static_cast<int64_t>(V),
          tokens.ptr<int32_t>() + i * static_cast<int64_t>(width), im[i].drafts, im[i].draft_len, V,
          greedy, im[i].seed, im[i].image_index, im[i].base_token, im[i].round,
          scratch.ptr<float>() + i * static_cast<int64_t>(V));
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_verify_chains(p.ptr<float>(), q ? q->ptr<float>() : nullptr, tokens.ptr<int32_t>(),
                       static_cast<const ChainRoundImage*>(images.data), n_images, width, V, greedy,
                       scratch.ptr<float>(), static_cast<ChainVerdict*>(verdicts.data),
                       static_cast<CUstream_st*>(be.native_stream()));
#else
  (void)greedy;
  throw Error("internal: verifying on " + be.name() + " in a build without CUDA");
#endif
}

}  // namespace tessera::speculative
