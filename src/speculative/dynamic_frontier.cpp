#include "speculative/dynamic_frontier.h"

#include <algorithm>

#include "tessera/error.h"

#if defined(TESSERA_HAVE_CUDA)
#include "speculative/cuda/dynamic_frontier_kernels.h"
#endif

namespace tessera::speculative {

namespace {

int64_t aligned(int64_t bytes) {
  return (bytes + 255) / 256 * 256;
}

struct Views {
  DynamicImage* images;
  DynamicCandidate *best, *candidates;
  int32_t *frontier, *ranks;
};

Views views(Tensor& state, const DynamicLayout& L) {
  check(state.nbytes() >= static_cast<size_t>(L.end), "internal: a dynamic tree's round buffer");
  auto* base = static_cast<uint8_t*>(state.data);
  return {reinterpret_cast<DynamicImage*>(base + L.images),
          reinterpret_cast<DynamicCandidate*>(base + L.best),
          reinterpret_cast<DynamicCandidate*>(base + L.candidates),
          reinterpret_cast<int32_t*>(base + L.frontier),
          reinterpret_cast<int32_t*>(base + L.ranks)};
}

#if !defined(TESSERA_HAVE_CUDA)
[[noreturn]] void no_cuda(const Backend& be) {
  throw Error("internal: a dynamic tree's frontier on " + be.name() + " in a build without CUDA");
}
#endif

}  // namespace

DynamicLayout dynamic_layout(int m, int K, int depth, int total) {
  check(m >= 1 && K >= 1 && depth >= 1 && total >= 1, "internal: dynamic_layout");
  DynamicLayout L;
  L.m = m;
  L.K = K;
  L.C = K + (depth - 1) * K * K;
  L.total = total;
  L.images = 0;
  L.best = aligned(int64_t{m} * static_cast<int64_t>(sizeof(DynamicImage)));
  L.frontier =
      L.best + aligned(int64_t{m} * total * static_cast<int64_t>(sizeof(DynamicCandidate)));
  L.ranks = L.frontier + aligned(int64_t{m} * K * 4);
  L.candidates = L.ranks + aligned(int64_t{m} * L.C * 4);
  L.end = L.candidates + int64_t{m} * L.C * static_cast<int64_t>(sizeof(DynamicCandidate));
  return L;
}

void expand_frontiers(Backend& be, Tensor& state, const DynamicLayout& L, const Tensor& ids,
                      const Tensor& mass, const Tensor& flag, int depth) {
  const int rows = depth == 1 ? 1 : L.K;  // ranked rows an image: the root's, or its frontier's
  check(ids.dtype == DType::I32 && mass.dtype == DType::F32 && flag.dtype == DType::I32 &&
            ids.numel() >= int64_t{L.m} * rows * L.K && mass.numel() >= ids.numel() && depth >= 1 &&
            (depth == 1 || L.C >= L.K + (depth - 1) * L.K * L.K),
        "internal: expand_frontiers shapes");
  const Views v = views(state, L);
  if (be.host_memory()) {
    const int32_t failed = *flag.ptr<int32_t>();
    for (int i = 0; i < L.m; ++i) {
      DynamicImage& im = v.images[i];
      DynamicCandidate* c = v.candidates + int64_t{i} * L.C;
      int32_t* frontier = v.frontier + int64_t{i} * L.K;
      const int64_t row = int64_t{i} * rows * L.K;
      const int first = expand_image(im, c, frontier, ids.ptr<int32_t>() + row,
                                     mass.ptr<float>() + row, L.K, depth, failed);
      if (depth > 1 && im.frontier == 0) continue;  // stopped: no candidates, no frontier
      for (int x = first; x < im.count; ++x)
        place_in_frontier(im, c, frontier, L.K, depth, first, x);
      im.frontier = std::min(im.count - first, L.K);
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_expand_frontiers(v.images, v.candidates, v.frontier, ids.ptr<int32_t>(), mass.ptr<float>(),
                          flag.ptr<int32_t>(), L.m, L.K, L.C, rows, depth,
                          static_cast<CUstream_st*>(be.native_stream()));
#else
  no_cuda(be);
#endif
}

void feed_frontiers(Backend& be, Tensor& state, const DynamicLayout& L, int halves, int d,
                    int tree_rows, int prev_rows, Tensor& tokens, Tensor* feature_rows,
                    Tensor& mask, int stride) {
  const int64_t rows = int64_t{halves} * L.m * L.K;
  check(
      tokens.dtype == DType::I32 && tokens.numel() >= rows &&
          (!feature_rows || (feature_rows->dtype == DType::I32 && feature_rows->numel() >= rows)) &&
          mask.dtype == DType::U8 && mask.numel() >= rows * stride && tree_rows >= 0 &&
          stride >= tree_rows + L.K && (d == 1 || tree_rows >= L.K),
      "internal: feed_frontiers shapes");
  const Views v = views(state, L);
  int32_t* feature = feature_rows ? feature_rows->ptr<int32_t>() : nullptr;
  if (be.host_memory()) {
    for (int i = 0; i < L.m; ++i) {
      DynamicImage& im = v.images[i];
      const DynamicCandidate* c = v.candidates + int64_t{i} * L.C;
      const int32_t* frontier = v.frontier + int64_t{i} * L.K;
      feed_image(im, v.candidates + int64_t{i} * L.C, frontier, i, L.m, halves, L.K, d, tree_rows,
                 prev_rows, 0, tokens.ptr<int32_t>(), feature);
      for (int h = 0; h < halves; ++h)
        for (int k = 0; k < L.K; ++k) {
          uint8_t* row = mask.ptr<uint8_t>() + ((int64_t{h} * L.m + i) * L.K + k) * stride;
          clear_mask_row(row, stride, im.tree_base, 0, 1);
          mark_mask_path(row, c, k < im.frontier ? frontier[k] : -1, im.tree_base, tree_rows + k);
        }
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_feed_frontiers(v.images, v.candidates, v.frontier, L.m, halves, L.K, L.C, d, tree_rows,
                        prev_rows, tokens.ptr<int32_t>(), feature, mask.ptr<uint8_t>(), stride,
                        static_cast<CUstream_st*>(be.native_stream()));
#else
  no_cuda(be);
#endif
}

void best_candidates(Backend& be, Tensor& state, const DynamicLayout& L) {
  const Views v = views(state, L);
  if (be.host_memory()) {
    for (int i = 0; i < L.m; ++i) {
      DynamicImage& im = v.images[i];
      const DynamicCandidate* c = v.candidates + int64_t{i} * L.C;
      int32_t* ranks = v.ranks + int64_t{i} * L.C;
      for (int x = 0; x < im.count; ++x) ranks[x] = candidate_place(c, 0, im.count, x);
      for (int x = 0; x < im.count; ++x)
        copy_to_best(c, ranks, L.total, v.best + int64_t{i} * L.total, x);
      im.best = std::min(im.count, L.total);
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_best_candidates(v.images, v.candidates, v.ranks, v.best, L.m, L.C, L.total,
                         static_cast<CUstream_st*>(be.native_stream()));
#else
  no_cuda(be);
#endif
}

}  // namespace tessera::speculative
