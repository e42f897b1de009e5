// Grouped Speculative Decoding (GSD (So et al., 2025) §4, Eq. 4, Alg. 3 and Alg. 5; published code
// junhyukso/GSD, scheduler/jacobi_iteration_lumina_mgpt.py): x~ is verified with the target and
// draft masses of a dynamic cluster C(x~) around it in the target's probability ranking.
#include <algorithm>
#include <cmath>
#include <vector>

#include "speculative/rules/rules.h"
#include "tessera/error.h"

namespace tessera::speculative {
namespace {

class GsdRule final : public AcceptanceRule {
 public:
  GsdRule(const GsdParams& params, std::shared_ptr<const std::vector<float>> embedding, int dim)
      : params_(params), emb_(std::move(embedding)), dim_(dim) {
    check(emb_ != nullptr && dim_ > 0 && emb_->size() % static_cast<size_t>(dim_) == 0,
          "GSD: the embedding must be a [V, dim] matrix with dim > 0");
    rows_ = emb_->size() / static_cast<size_t>(dim_);
  }

  std::string name() const override { return "gsd"; }

  double accept_probability(const NodeView& n) const override {
    const std::vector<int> c = cluster(n.p, n.token);
    double pc = 0.0, qc = 0.0;
    for (int y : c) {
      pc += n.p[y];
      qc += n.q_of(y);  // one-hot q: q(C) = 1 since x~ is in C
    }
    return ratio_accept(pc, qc);  // Alg. 3 line 16: accept iff u <= min(1, p'(C)/q'(C))
  }

  // Alg. 3 line 17: the token-level residual of SJD, not a cluster-level one.
  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }

  // C(x~) = window of the descending ranking around x~, filtered (Alg. 3 lines 2-11); x~ first.
  std::vector<int> cluster(std::span<const float> p, int token) const {
    if (p.size() > rows_)
      throw Error("GSD: the embedding has " + std::to_string(rows_) +
                  " rows but the target distribution has " + std::to_string(p.size()) + " tokens");
    const int V = static_cast<int>(p.size());
    const int half = std::max(0, params_.g / 2);  // G//2
    // Rank 0 = most probable; ties by smaller id (a strict total order, so the window is unique).
    auto before = [&p](int y, int z) { return p[y] > p[z] || (p[y] == p[z] && y < z); };
    // Ranks [r - G/2, r) are the min(G/2, r) tokens ranked just before x~; ranks (r, r + G/2) the
    // min(G/2 - 1, V - r - 1) ranked just after. One pass with two bounded heaps finds both
    // without sorting V (the rank r itself is never needed).
    const size_t n_up = static_cast<size_t>(half);
    const size_t n_down = static_cast<size_t>(std::max(0, half - 1));
    std::vector<int> up, down;
    up.reserve(n_up + 1);
    down.reserve(n_down + 1);
    auto up_cmp = [&](int a, int b) { return before(b, a); };    // heap top = earliest-ranked
    auto down_cmp = [&](int a, int b) { return before(a, b); };  // heap top = latest-ranked
    for (int y = 0; y < V; ++y) {
      if (y == token) continue;
      if (before(y, token)) {
        if (n_up == 0) continue;
        if (up.size() < n_up) {
          up.push_back(y);
          std::push_heap(up.begin(), up.end(), up_cmp);
        } else if (before(up.front(), y)) {
          std::pop_heap(up.begin(), up.end(), up_cmp);
          up.back() = y;
          std::push_heap(up.begin(), up.end(), up_cmp);
        }
      } else {
        if (n_down == 0) continue;
        if (down.size() < n_down) {
          down.push_back(y);
          std::push_heap(down.begin(), down.end(), down_cmp);
        } else if (before(y, down.front())) {
          std::pop_heap(down.begin(), down.end(), down_cmp);
          down.back() = y;
          std::push_heap(down.begin(), down.end(), down_cmp);
        }
      }
    }
    // x~ is always in C, even when the slice [r - G/2, r + G/2) would miss it (G/2 = 0).
    std::vector<int> c{token};
    const double px = p[token];
    const float* ex = emb_->data() + static_cast<size_t>(token) * dim_;
    auto keep = [&](int y) {
      // Alg. 3 lines 9-10: pop if |p(y) - p(x~)| > δ or M_d[x~, y] > d (squared Euclidean, as the
      // published code's ‖a‖² + ‖b‖² - 2ab, computed directly in double).
      if (std::abs(static_cast<double>(p[y]) - px) > static_cast<double>(params_.delta))
        return false;
      const float* ey = emb_->data() + static_cast<size_t>(y) * dim_;
      double d2 = 0.0;
      for (int k = 0; k < dim_; ++k) {
        const double diff = static_cast<double>(ex[k]) - static_cast<double>(ey[k]);
        d2 += diff * diff;
      }
      return d2 <= static_cast<double>(params_.d);
    };
    for (int y : up)
      if (keep(y)) c.push_back(y);
    for (int y : down)
      if (keep(y)) c.push_back(y);
    return c;
  }

 private:
  GsdParams params_;
  std::shared_ptr<const std::vector<float>> emb_;
  int dim_;
  size_t rows_ = 0;
};

}  // namespace

std::unique_ptr<AcceptanceRule> make_gsd_rule(const GsdParams& params,
                                              std::shared_ptr<const std::vector<float>> embedding,
                                              int dim) {
  return std::make_unique<GsdRule>(params, std::move(embedding), dim);
}

}  // namespace tessera::speculative
