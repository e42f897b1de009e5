#include "speculative/chain_commit.h"

#include <algorithm>

#include "tessera/error.h"

#if defined(TESSERA_HAVE_CUDA)
#include "speculative/cuda/chain_commit_kernels.h"
#endif

namespace tessera::speculative {

void commit_chain_round(Backend& be, const Tensor& verdicts, const Tensor& nodes, int m, int width,
                        Tensor& state, Tensor& history, Tensor& committed, const Tensor& fields,
                        int n_fields, const Tensor& round_flag, Tensor& burst_flag,
                        JacobiWindows* windows) {
  check(m >= 0 && width >= 1 && n_fields >= 0, "internal: commit_chain_round sizes");
  check(verdicts.nbytes() >= static_cast<size_t>(m) * sizeof(DraftVerdict) &&
            nodes.nbytes() >= static_cast<size_t>(m) * width * sizeof(WalkNode),
        "internal: commit_chain_round verdicts or nodes");
  check(state.dtype == DType::I32 && state.numel() >= m && committed.dtype == DType::I32 &&
            committed.numel() >= m && history.dtype == DType::I32 && history.dim(0) >= m,
        "internal: commit_chain_round state, record or history");
  check(fields.nbytes() >= static_cast<size_t>(n_fields) * sizeof(RoundField),
        "internal: commit_chain_round fields");
  check(round_flag.dtype == DType::I32 && round_flag.numel() >= 1 &&
            burst_flag.dtype == DType::I32 && burst_flag.numel() >= 1,
        "internal: commit_chain_round flags");
  if (windows)
    check(windows->carried.dtype == DType::I32 &&
              windows->carried.numel() >= static_cast<int64_t>(m) * width &&
              windows->images.nbytes() >= static_cast<size_t>(m) * sizeof(WindowImage) &&
              windows->words.dtype == DType::I32 &&
              windows->words.numel() >= static_cast<int64_t>(m) * width * kWindowWords &&
              windows->vocab >= 1,
          "internal: commit_chain_round windows");
  if (m == 0) return;
  const int n_tokens = static_cast<int>(history.dim(-1));
  const auto* v = static_cast<const DraftVerdict*>(verdicts.data);
  const auto* walk = static_cast<const WalkNode*>(nodes.data);
  const auto* f = static_cast<const RoundField*>(fields.data);
  if (be.host_memory()) {
    int32_t& flag = *burst_flag.ptr<int32_t>();
    flag |= *round_flag.ptr<int32_t>();
    if (flag) {
      std::fill_n(committed.ptr<int32_t>(), m, 0);
      return;
    }
    int32_t* n = state.ptr<int32_t>();
    int32_t* h = history.ptr<int32_t>();
    int32_t* words = windows ? windows->words.ptr<int32_t>() : nullptr;
    for (int j = 0; j < m; ++j) {
      check(n[j] + v[j].accepted + 1 <= n_tokens && v[j].accepted <= width,
            "internal: a burst's commit past its image");
      committed.ptr<int32_t>()[j] = commit_chain_image(v[j], walk + static_cast<size_t>(j) * width,
                                                       h + static_cast<size_t>(j) * n_tokens, n[j]);
      if (!windows) continue;
      auto& w = static_cast<WindowImage*>(windows->images.data)[j];
      check(w.depth >= 0 && w.depth <= width, "internal: a Jacobi window wider than the round");
      refill_jacobi_window(v[j], windows->carried.ptr<int32_t>() + static_cast<size_t>(j) * width,
                           w, n[j], windows->vocab,
                           words + static_cast<size_t>(j) * width * kWindowWords);
    }
    for (int k = 0; k < n_fields; ++k) {
      const int j = f[k].image;
      check(j >= 0 && j < m, "internal: a round field of no image");
      check(f[k].kind != RoundField::kWindow ||
                (words && f[k].add >= 0 && f[k].add < m * width * kWindowWords),
            "internal: a window field without its window");
      apply_round_field(f[k], committed.ptr<int32_t>()[j], h + static_cast<size_t>(j) * n_tokens,
                        n[j], words);
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_commit_chain_round(
      v, walk, m, width, state.ptr<int32_t>(), history.ptr<int32_t>(), n_tokens,
      committed.ptr<int32_t>(), f, n_fields, round_flag.ptr<int32_t>(), burst_flag.ptr<int32_t>(),
      windows ? windows->carried.ptr<int32_t>() : nullptr,
      windows ? static_cast<WindowImage*>(windows->images.data) : nullptr,
      windows ? windows->words.ptr<int32_t>() : nullptr, windows ? windows->vocab : 0,
      static_cast<CUstream_st*>(be.native_stream()));
#else
  throw Error("internal: a burst's commit on " + be.name() + " in a build without CUDA");
#endif
}

}  // namespace tessera::speculative
