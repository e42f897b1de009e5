#include "sampling/sample_rows.h"

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "sampling/rng.h"
#include "sampling/sampling_rules.h"
#include "tessera/error.h"
#if defined(TESSERA_HAVE_CUDA)
#include "sampling/cuda/sample_kernels.h"
#endif

namespace tessera {

DeviceSampleParams device_sample_params(const SamplingParams& p, uint64_t seed,
                                        uint64_t image_index, uint32_t token_index) {
  DeviceSampleParams d;
  d.cfg_scale = p.cfg_scale;
  d.cfg_interval = p.cfg_interval;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.uses_cfg = p.uses_cfg() ? 1 : 0;
  d.seed = seed;
  d.image_index = image_index;
  d.token_index = token_index;
  return d;
}

SamplingParams sampling_params(const DeviceSampleParams& d) {
  SamplingParams p;
  p.cfg_scale = d.cfg_scale;
  p.cfg_interval = d.cfg_interval;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  return p;
}

const char* device_sample_failed() {
  return "the model produced non-finite logits (NaN or Inf) in a step sampled on the device";
}

namespace {

// Row r's target distribution on the host (the CPU backend's rows), with the token index in the
// error as the host loops report it.
void host_distribution(const Tensor& cond, const Tensor* uncond, int r, int V,
                       const DeviceSampleParams& d, std::span<float> probs) {
  const SamplingParams p = sampling_params(d);
  const std::span<const float> c(cond.ptr<float>() + static_cast<size_t>(r) * V, V);
  std::span<const float> u;
  if (uncond && guided_at(d.uses_cfg != 0, d.cfg_interval, d.token_index))
    u = {uncond->ptr<float>() + static_cast<size_t>(r) * V, static_cast<size_t>(V)};
  try {
    target_distribution(c, u, p.cfg_scale, p, probs);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " at image token " + std::to_string(d.token_index));
  }
}

// Row r's token from its distribution (the host chains' draw) written where out says.
void host_draw(std::span<const float> probs, int r, DeviceSampleParams& d,
               const SampleRowsOut& out) {
  const int32_t t =
      sampling_params(d).greedy()
          ? argmax(probs)
          : sample_index(probs, CounterRng(d.seed, d.image_index).uniform(d.token_index, d.stream));
  int32_t* tokens = out.tokens.ptr<int32_t>();
  tokens[r] = t;
  if (out.mirror > 0) tokens[out.mirror + r] = t;
  if (out.history.data) {
    check(d.token_index < static_cast<uint32_t>(out.history_stride),
          "internal: sample_rows history too short");
    out.history.ptr<int32_t>()[static_cast<size_t>(r) * out.history_stride + d.token_index] = t;
  }
  if (out.advance) d.token_index++;
}

void check_out(const SampleRowsOut& out, int n_rows) {
  check(out.tokens.dtype == DType::I32 && out.tokens.numel() >= out.mirror + n_rows,
        "internal: sample_rows tokens size");
  check(!out.history.data || (out.history.dtype == DType::I32 &&
                              out.history.numel() >= int64_t{n_rows} * out.history_stride),
        "internal: sample_rows history size");
}

void check_rows(const Tensor& cond, const Tensor* uncond, int n_rows, const Tensor& params) {
  const int64_t V = cond.dim(-1);
  check(cond.dtype == DType::F32 && cond.numel() >= n_rows * V,
        "internal: sample_rows logits shape");
  check(!uncond || (uncond->dtype == DType::F32 && uncond->numel() >= n_rows * V),
        "internal: sample_rows unconditional logits shape");
  check(params.nbytes() >= static_cast<size_t>(n_rows) * sizeof(DeviceSampleParams),
        "internal: sample_rows params size");
}

}  // namespace

void distribution_rows(Backend& be, const Tensor& cond, const Tensor* uncond, int n_rows,
                       const Tensor& params, Tensor& probs, Tensor& error_flag) {
  const int V = static_cast<int>(cond.dim(-1));
  check_rows(cond, uncond, n_rows, params);
  check(probs.dtype == DType::F32 && probs.numel() >= int64_t{n_rows} * V,
        "internal: distribution_rows output shape");
  if (n_rows == 0) return;
  const auto* ps = static_cast<const DeviceSampleParams*>(params.data);
  if (be.host_memory()) {
    for (int r = 0; r < n_rows; ++r)
      host_distribution(cond, uncond, r, V, ps[r],
                        {probs.ptr<float>() + static_cast<size_t>(r) * V, static_cast<size_t>(V)});
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_distribution_rows(cond.ptr<float>(), uncond ? uncond->ptr<float>() : nullptr, n_rows, V,
                           ps, probs.ptr<float>(), error_flag.ptr<int32_t>(),
                           static_cast<CUstream_st*>(be.native_stream()));
#else
  (void)error_flag;
  throw Error("internal: distributions on " + be.name() + " in a build without CUDA");
#endif
}

void draw_rows(Backend& be, const Tensor& probs, int n_rows, Tensor& params,
               const SampleRowsOut& out, Tensor& error_flag) {
  const int V = static_cast<int>(probs.dim(-1));
  check_rows(probs, nullptr, n_rows, params);
  check_out(out, n_rows);
  if (n_rows == 0) return;
  if (be.host_memory()) {
    auto* ps = static_cast<DeviceSampleParams*>(params.data);
    for (int r = 0; r < n_rows; ++r)
      host_draw({probs.ptr<float>() + static_cast<size_t>(r) * V, static_cast<size_t>(V)}, r, ps[r],
                out);
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_draw_rows(probs.ptr<float>(), n_rows, V, static_cast<DeviceSampleParams*>(params.data),
                   out.tokens.ptr<int32_t>(), out.mirror,
                   out.history.data ? out.history.ptr<int32_t>() : nullptr, out.history_stride,
                   out.advance, error_flag.ptr<int32_t>(),
                   static_cast<CUstream_st*>(be.native_stream()));
#else
  (void)error_flag;
  throw Error("internal: draws on " + be.name() + " in a build without CUDA");
#endif
}

void top_rows(Backend& be, const Tensor& probs, int n_rows, int k, Tensor& ids, Tensor* mass,
              Tensor* inputs) {
  const int V = static_cast<int>(probs.dim(-1));
  check(probs.dtype == DType::F32 && probs.numel() >= int64_t{n_rows} * V && k >= 1 &&
            ids.dtype == DType::I32 && ids.numel() >= int64_t{n_rows} * k &&
            (!mass || (mass->dtype == DType::F32 && mass->numel() >= int64_t{n_rows} * k)) &&
            (!inputs || (inputs->dtype == DType::I32 && inputs->numel() >= int64_t{n_rows} * k)),
        "internal: top_rows shapes");
  if (n_rows == 0) return;
  if (be.host_memory()) {
    std::vector<int> order;
    for (int r = 0; r < n_rows; ++r) {
      const float* p = probs.ptr<float>() + static_cast<size_t>(r) * V;
      order.clear();
      for (int y = 0; y < V; ++y)
        if (p[y] > 0.0f) order.push_back(y);
      const size_t n = std::min(order.size(), static_cast<size_t>(k));
      std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                        [&](int a, int b) { return argmax_prefers(p[a], a, p[b], b); });
      int32_t* out = ids.ptr<int32_t>() + static_cast<size_t>(r) * k;
      for (int j = 0; j < k; ++j) out[j] = j < static_cast<int>(n) ? order[j] : -1;
      if (inputs)
        for (int j = 0; j < k; ++j)
          inputs->ptr<int32_t>()[static_cast<size_t>(r) * k + j] = token_as_input(out[j]);
      if (!mass) continue;
      float* m = mass->ptr<float>() + static_cast<size_t>(r) * k;
      for (int j = 0; j < k; ++j) m[j] = j < static_cast<int>(n) ? p[order[j]] : 0.0f;
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_top_rows(probs.ptr<float>(), n_rows, V, k, ids.ptr<int32_t>(),
                  mass ? mass->ptr<float>() : nullptr, inputs ? inputs->ptr<int32_t>() : nullptr,
                  static_cast<CUstream_st*>(be.native_stream()));
#else
  throw Error("internal: top_rows on " + be.name() + " in a build without CUDA");
#endif
}

void row_square_sums(Backend& be, const Tensor& probs, int n_rows, Tensor& sums) {
  const int V = static_cast<int>(probs.dim(-1));
  check(probs.dtype == DType::F32 && probs.numel() >= int64_t{n_rows} * V &&
            sums.dtype == DType::F64 && sums.numel() >= n_rows,
        "internal: row_square_sums shapes");
  if (n_rows == 0) return;
  if (be.host_memory()) {
    for (int r = 0; r < n_rows; ++r) {
      const float* q = probs.ptr<float>() + static_cast<size_t>(r) * V;
      double total = 0.0;
      for (int y = 0; y < V; ++y) total += static_cast<double>(q[y]) * q[y];
      sums.ptr<double>()[r] = total;
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_row_square_sums(probs.ptr<float>(), n_rows, V, sums.ptr<double>(),
                         static_cast<CUstream_st*>(be.native_stream()));
#else
  throw Error("internal: row_square_sums on " + be.name() + " in a build without CUDA");
#endif
}

void draw_children_rows(Backend& be, const Tensor& probs, int n_rows, int k, const Tensor& params,
                        Tensor& q, Tensor& tokens, Tensor* inputs) {
  const int V = static_cast<int>(probs.dim(-1));
  const int64_t n = int64_t{n_rows} * k;
  check(probs.dtype == DType::F32 && probs.numel() >= int64_t{n_rows} * V && k >= 1 &&
            q.dtype == DType::F32 && q.numel() >= n * V && tokens.dtype == DType::I32 &&
            tokens.numel() >= n &&
            params.nbytes() >= static_cast<size_t>(n) * sizeof(DeviceSampleParams) &&
            (!inputs || (inputs->dtype == DType::I32 && inputs->numel() >= n)),
        "internal: draw_children_rows shapes");
  if (n_rows == 0) return;
  const auto* ps = static_cast<const DeviceSampleParams*>(params.data);
  if (be.host_memory()) {
    for (int r = 0; r < n_rows; ++r) {
      const float* p = probs.ptr<float>() + static_cast<size_t>(r) * V;
      int32_t* out = tokens.ptr<int32_t>() + static_cast<size_t>(r) * k;
      for (int c = 0; c < k; ++c) {
        float* qc = q.ptr<float>() + (static_cast<size_t>(r) * k + c) * V;
        std::copy_n(c == 0 ? p : qc - V, V, qc);
        const std::span<float> row(qc, static_cast<size_t>(V));
        if (c > 0) qc[out[c - 1]] = 0.0f;
        const bool mass = c > 0
                              ? normalise(row)  // q_0 = P as it is
                              : std::any_of(row.begin(), row.end(), [](float x) { return x > 0; });
        if (!mass) {  // no token left with mass: the rest are -1, their q rows 0
          std::fill(out + c, out + k, -1);
          std::fill(qc, qc + static_cast<size_t>(k - c) * V, 0.0f);
          break;
        }
        const DeviceSampleParams& d = ps[static_cast<size_t>(r) * k + c];
        out[c] = sampling_params(d).greedy()
                     ? argmax(row)
                     : sample_index(
                           row, CounterRng(d.seed, d.image_index).uniform(d.token_index, d.stream));
      }
      if (inputs)
        for (int c = 0; c < k; ++c)
          inputs->ptr<int32_t>()[static_cast<size_t>(r) * k + c] = token_as_input(out[c]);
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_draw_children_rows(probs.ptr<float>(), n_rows, V, k, ps, q.ptr<float>(),
                            tokens.ptr<int32_t>(), inputs ? inputs->ptr<int32_t>() : nullptr,
                            static_cast<CUstream_st*>(be.native_stream()));
#else
  throw Error("internal: draw_children_rows on " + be.name() + " in a build without CUDA");
#endif
}

void sample_rows(Backend& be, const Tensor& cond, const Tensor* uncond, int n_rows, Tensor& params,
                 const SampleRowsOut& out, Tensor& error_flag) {
  const int V = static_cast<int>(cond.dim(-1));
  check_rows(cond, uncond, n_rows, params);
  check_out(out, n_rows);
  if (n_rows == 0) return;
  if (be.host_memory()) {
    auto* ps = static_cast<DeviceSampleParams*>(params.data);
    std::vector<float> probs(static_cast<size_t>(V));
    for (int r = 0; r < n_rows; ++r) {
      host_distribution(cond, uncond, r, V, ps[r], probs);
      host_draw(probs, r, ps[r], out);
    }
    return;
  }
#if defined(TESSERA_HAVE_CUDA)
  launch_sample_rows(cond.ptr<float>(), uncond ? uncond->ptr<float>() : nullptr, n_rows, V,
                     static_cast<DeviceSampleParams*>(params.data), out.tokens.ptr<int32_t>(),
                     out.mirror, out.history.data ? out.history.ptr<int32_t>() : nullptr,
                     out.history_stride, out.advance, error_flag.ptr<int32_t>(),
                     static_cast<CUstream_st*>(be.native_stream()));
#else
  (void)error_flag;
  throw Error("internal: sampling on " + be.name() + " in a build without CUDA");
#endif
}

}  // namespace tessera
