// Grouped Speculative Decoding (GSD (So et al., 2025) §4, Eq. 4, Alg. 3 and Alg. 5; published code
// junhyukso/GSD, scheduler/jacobi_iteration_lumina_mgpt.py): x~ is verified with the target and
// draft masses of a dynamic cluster C(x~) around it in the target's probability ranking.
#include <algorithm>
#include <cmath>
#include <vector>

#include "speculative/rules/rules.h"
#include "speculative/verify_rows.h"
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

  std::string name() const override { return params_.reference ? "gsd-ref" : "gsd"; }

  double accept_probability(const NodeView& n) const override {
    if (params_.g / 2 <= kGsdMaxHalf) {  // the device walk's function (gsd_math.h)
      check_rows(n.p.size());
      return gsd_accept_probability(data(), n.p.data(), n.q.empty() ? nullptr : n.q.data(), n.token,
                                    static_cast<int>(n.p.size()));
    }
    // A wider window: bounded heaps, then the members in the order every form adds them.
    std::vector<int> down, up;
    window(n.p, n.token, down, up);
    // junhyukso/GSD slices logit_sort[r-7 : r+7]: for r < G//2 the start is negative, Python's
    // slice is empty, p'(C)/q'(C) = 0/0 = NaN and the draft is rejected (r < NaN is false). The
    // paper's slice is clipped at 0 instead.
    if (params_.reference && static_cast<int>(down.size()) < params_.g / 2) return 0.0;
    const GsdRuleData r = data();
    const float* q = n.q.empty() ? nullptr : n.q.data();  // one-hot: q(C) = q(x~) = 1
    double pc = n.p[n.token], qc = q ? static_cast<double>(q[n.token]) : 1.0;
    for (int y : down) gsd_add_member(r, n.p.data(), q, n.token, y, &pc, &qc);
    for (int y : up) gsd_add_member(r, n.p.data(), q, n.token, y, &pc, &qc);
    return ratio_accept(pc, qc);  // Alg. 3 line 16: accept iff u <= min(1, p'(C)/q'(C))
  }

  // Alg. 3 line 17: the token-level residual of SJD, not a cluster-level one.
  void residual(const NodeView& n, std::span<float> out) const override { exact_residual(n, out); }

  // G* (COOL-SD Eq. 5) with every f(y) from one ranking of the row: the device walk's function
  // (verify_rows.h), O(V log^2 V + V G) where a grouping a token would be O(V^2). The values are
  // optimal_residual's (tests/test_spec_rules.cpp).
  void g_star(const NodeView& n, std::span<float> out) const override {
    check_rows(n.p.size());
    const int V = static_cast<int>(n.p.size());
    const float* q = n.q.empty() ? nullptr : n.q.data();
    check(!q || V <= kGsdMaxRankedVocab, "GSD: G* ranks at most 2^24 tokens");
    WalkRule rule = walk();
    rule.optimal = 1;
    const double fx = q ? 0.0 : accept_probability(n);  // one-hot: only f(x~) is needed
    std::vector<float> ranking(q ? static_cast<size_t>(gsd_rank_scratch(V)) : 0);
    optimal_residual_row(SerialLanes{}, rule, n.p.data(), q, n.token, V, 0.0, fx, ranking.data(),
                         out.data());
  }

  // The device walk: GSD's acceptance with the exact rule's residual.
  std::optional<WalkRuleSource> walk_rule() const override {
    WalkRuleSource s;
    s.rule = walk();
    s.embedding = emb_;
    return s;
  }

  // The walk's descriptor: GSD over this embedding (the exact rule's residual).
  WalkRule walk() const {
    WalkRule w;
    w.kind = WalkRule::Kind::Gsd;
    w.gsd = data();
    return w;
  }

  GsdRuleData data() const {
    GsdRuleData r;
    r.g = params_.g;
    r.d = params_.d;
    r.delta = params_.delta;
    r.reference = params_.reference ? 1 : 0;
    r.embedding = emb_->data();
    r.rows = static_cast<int32_t>(rows_);
    r.dim = dim_;
    return r;
  }

  void check_rows(size_t V) const {
    if (V > rows_)
      throw Error("GSD: the embedding has " + std::to_string(rows_) +
                  " rows but the target distribution has " + std::to_string(V) + " tokens");
  }
  // The window of the ascending ranking around x~ (Alg. 3 lines 2-4), unfiltered: down, the tokens
  // just below x~ nearest (highest) first; up, those just above nearest (lowest) first.
  void window(std::span<const float> p, int token, std::vector<int>& down,
              std::vector<int>& up) const {
    check_rows(p.size());
    const int V = static_cast<int>(p.size());
    const int half = std::max(0, params_.g / 2);  // G//2
    // Alg. 3 line 2: sort(p_k), ascending (torch.sort's default, and the published code's
    // logits.sort()); ties by smaller id first (a stable sort over ids 0..V-1), so the order is a
    // strict total order and the window is unique. x~ sits at sorted position r; line 4's slice
    // [r - G//2, r + G//2) holds the min(G//2, r) tokens sorted just below x~ (less probable) and
    // the min(G//2 - 1, V - r - 1) just above (more probable). One pass with two bounded heaps
    // finds both without sorting V (r itself is never needed).
    auto below = [&p](int y, int z) { return gsd_below(p.data(), y, z); };
    const size_t n_down = static_cast<size_t>(half);
    const size_t n_up = static_cast<size_t>(std::max(0, half - 1));
    down.clear();
    up.clear();
    down.reserve(n_down + 1);
    up.reserve(n_up + 1);
    auto down_cmp = [&](int a, int b) { return below(b, a); };  // heap top = lowest-sorted
    auto up_cmp = [&](int a, int b) { return below(a, b); };    // heap top = highest-sorted
    for (int y = 0; y < V; ++y) {
      if (y == token) continue;
      if (below(y, token)) {
        if (n_down == 0) continue;
        if (down.size() < n_down) {
          down.push_back(y);
          std::push_heap(down.begin(), down.end(), down_cmp);
        } else if (below(down.front(), y)) {
          std::pop_heap(down.begin(), down.end(), down_cmp);
          down.back() = y;
          std::push_heap(down.begin(), down.end(), down_cmp);
        }
      } else {
        if (n_up == 0) continue;
        if (up.size() < n_up) {
          up.push_back(y);
          std::push_heap(up.begin(), up.end(), up_cmp);
        } else if (below(y, up.front())) {
          std::pop_heap(up.begin(), up.end(), up_cmp);
          up.back() = y;
          std::push_heap(up.begin(), up.end(), up_cmp);
        }
      }
    }
    std::sort(down.begin(), down.end(), [&](int a, int b) { return below(b, a); });
    std::sort(up.begin(), up.end(), below);
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
