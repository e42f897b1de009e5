#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/vector_math.h"
#include "sampling/sampling_rules.h"
#include "tessera/error.h"

namespace tessera {

namespace {
// exp of one SIMD block through libmvec (common/vector_math.h). glibc's scalar expf cost ~5 us
// per 1024-token distribution, paid once per position of a speculative window (and per draft
// step); simd_blocks gives every element the same instructions whatever its position.
[[gnu::noinline]] void exp_block(const float* x, const float*, float* y) {
#pragma omp simd
  for (int64_t i = 0; i < kSimdBlock; ++i) y[i] = expf(x[i]);
}
}  // namespace

void filter_top_k_top_p(std::span<float> logits, int top_k, float top_p) {
  const int V = static_cast<int>(logits.size());
  // top-k keeps everything when k >= V (the k-th largest is the smallest: nothing is below it).
  if (top_k > 0 && top_k < V) {
    const int k = std::max(top_k, 1);
    std::vector<float> tmp(logits.begin(), logits.end());
    std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<float>());
    const float threshold = tmp[k - 1];
    for (float& l : logits)
      if (l < threshold) l = -INFINITY;  // strictly below the k-th value: ties survive
  }
  if (top_p < 1.0f) {
    std::vector<int> idx;
    for (int i = 0; i < V; ++i)
      if (logits[i] != -INFINITY) idx.push_back(i);
    // Descending by logit; ties by index, so the kept set is deterministic.
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return logits[a] > logits[b]; });
    const float mx = logits[idx.front()];
    float total = 0.0f;
    std::vector<float> e(idx.size());
    for (size_t i = 0; i < idx.size(); ++i) total += (e[i] = std::exp(logits[idx[i]] - mx));
    // Keep sorted position i iff i == 0 or the cumulative probability before it is <= top_p.
    float cum = 0.0f;
    for (size_t i = 0; i < idx.size(); ++i) {
      if (i > 0 && cum > top_p) logits[idx[i]] = -INFINITY;
      cum += e[i] / total;
    }
  }
}

void target_distribution(std::span<const float> cond, std::span<const float> uncond, float scale,
                         const SamplingParams& p, std::span<float> probs) {
  const size_t V = cond.size();
  check(probs.size() == V && (uncond.empty() || uncond.size() == V),
        "internal: target_distribution sizes");
  std::vector<float> l(V);
  bool finite = true;
  for (size_t i = 0; i < V; ++i) {
    l[i] = uncond.empty() ? cond[i] : guided_logit(cond[i], uncond[i], scale);
    finite &= std::isfinite(l[i]);
  }
  // A NaN or Inf here (broken weights, an overflowing activation) would silently become a
  // garbage token: stop instead. The caller adds which token it was.
  if (!finite) throw Error("the model produced non-finite logits (NaN or Inf)");
  if (p.temperature <= 0.0f) {  // greedy: one-hot on the argmax (filters cannot change it)
    std::fill(probs.begin(), probs.end(), 0.0f);
    probs[static_cast<size_t>(argmax(l))] = 1.0f;
    return;
  }
  const float t = temperature_divisor(p.temperature);
  for (float& v : l) v /= t;
  filter_top_k_top_p(l, p.top_k, p.top_p);
  const float mx = *std::max_element(l.begin(), l.end());
  for (float& v : l) v -= mx;  // -inf stays -inf
  simd_blocks("softmax", exp_block, l.data(), nullptr, probs.data(), static_cast<int64_t>(V),
              false);
  float total = 0.0f;  // in vocabulary order
  for (size_t i = 0; i < V; ++i) total += (probs[i] = l[i] == -INFINITY ? 0.0f : probs[i]);
  for (float& v : probs) v /= total;
}

int sample_index(std::span<const float> probs, double u) {
  const int i = draw_row(probs.data(), static_cast<int>(probs.size()), u);
  check(i >= 0, "internal: sampling from an empty distribution");
  return i;
}

int argmax(std::span<const float> values) {
  return argmax_row(values.data(), static_cast<int>(values.size()));
}

bool normalise(std::span<float> weights) {
  return normalise_row(weights.data(), static_cast<int>(weights.size()));
}

}  // namespace tessera
