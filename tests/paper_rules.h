// Acceptance rules written a second time, directly from their papers' equations, as independent
// references for the engine's rules (src/speculative/rules). Nothing here calls into the engine:
// distributions are plain double vectors, q is always an explicit distribution (a Jacobi draft is
// the one-hot δ_x), latent neighbours and GSD rankings are recomputed by brute force.
//
// Notation (COOL-SD (Li et al., 2026) §3.1): p = target, q = drafter, x = the drafted token, i in
// [1, L] its depth. Every rule gives f (accept iff u < f) and the unnormalised resampling
// distribution G; `effective_resampling` adds the one convention the papers leave open (G with no
// mass: the loop samples p, as src/speculative/verify.cpp does).
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::paper {

using Dist = std::vector<double>;

struct Node {
  Dist p;                // target P(.|prefix) after CFG, temperature, top-k, top-p
  Dist q;                // drafter Q(.|prefix); δ_x for a Jacobi (one-hot) draft
  int x = 0;             // drafted token
  int i = 1, L = 1;      // depth i in [1, L]
  bool one_hot = false;  // q is a Jacobi draft's δ_x (jadohu/LANTERN's dynamic-tree branch)
};

struct Rule {
  std::string name;
  std::function<double(const Node&)> f;  // acceptance probability
  std::function<Dist(const Node&)> g;    // resampling distribution, unnormalised
  // Greedy decoding (temperature 0): whether x survives, given the untempered p.
  std::function<bool(const Node&)> greedy;
};

inline int first_argmax(const Dist& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// min(1, num / q(x)). Only drafted tokens are ever tested, and a drafter draws x with q(x) > 0.
inline double ratio(double num, double qx) {
  if (!(qx > 0.0))
    throw std::logic_error("paper rule evaluated at a token the drafter cannot draw");
  return std::min(1.0, num / qx);
}

inline Dist positive_part(const Dist& a, const Dist& b) {  // [a - b]+
  Dist r(a.size());
  for (size_t y = 0; y < a.size(); ++y) r[y] = std::max(0.0, a[y] - b[y]);
  return r;
}

// Norm(G), or p where G has no mass (the loop's fallback; no paper defines Norm(0)).
inline Dist effective_resampling(const Dist& g, const Dist& p) {
  const double m = std::accumulate(g.begin(), g.end(), 0.0);
  if (!(m > 0.0)) return p;
  Dist r(g.size());
  for (size_t y = 0; y < g.size(); ++y) r[y] = g[y] / m;
  return r;
}

inline bool exact_greedy(const Node& n) {
  return n.x == first_argmax(n.p);
}

// Exact SD: f = min(1, p/q), G = Norm([p - q]+) (COOL-SD Eq. 1-2).
inline Rule exact() {
  return {"exact", [](const Node& n) { return ratio(n.p[n.x], n.q[n.x]); },
          [](const Node& n) { return positive_part(n.p, n.q); }, exact_greedy};
}

// f = min(1, ω(i, L) p/q), G = Norm([p - q]+): UniformRSD (ω = δ, COOL-SD Eq. 7), COOL-SD
// (Eq. 10), amplify (ω = k, GSD §5).
inline Rule omega_rule(std::string name, std::function<double(int, int)> omega) {
  return {std::move(name),
          [omega](const Node& n) { return ratio(omega(n.i, n.L) * n.p[n.x], n.q[n.x]); },
          [](const Node& n) { return positive_part(n.p, n.q); }, exact_greedy};
}

// COOL-SD Eq. 10: ω_i = δ exp(-ν i - μ), μ fixed by Σ_{i=1..L} exp(-ν i - μ) = L.
inline double cool_omega(double delta, double nu, int i, int L) {
  double s = 0.0;
  for (int j = 1; j <= L; ++j) s += std::exp(-nu * j);
  const double mu = std::log(s / L);
  return delta * std::exp(-nu * i - mu);
}

inline Rule uniform_rsd(double delta) {
  return omega_rule("uniform-rsd", [delta](int, int) { return delta; });
}
inline Rule cool_sd(double delta, double nu) {
  return omega_rule("cool-sd", [delta, nu](int i, int L) { return cool_omega(delta, nu, i, L); });
}
inline Rule amplify(double k) {
  return omega_rule("amplify", [k](int, int) { return k; });
}
// GSD §5 "Addition": f = min(1, (p + ε)/q).
inline Rule addition(double eps) {
  return {"addition", [eps](const Node& n) { return ratio(n.p[n.x] + eps, n.q[n.x]); },
          [](const Node& n) { return positive_part(n.p, n.q); }, exact_greedy};
}

// Medusa's typical acceptance (Cai et al., 2024, §2.3.1): x is accepted iff
//   p(x) > min(ε, δ exp(-H(p)))
// (the paper's δ is the code's posterior_alpha α), deterministically; q plays no part. H is the
// entropy of p; FasterDecoding/Medusa's evaluate_posterior computes it as -Σ p log(p + 1e-5),
// which `log_offset` reproduces (0 gives the paper's -Σ p log p with 0 log 0 = 0). No residual:
// after a rejection the next token is drawn from p itself (notes jacobi_grouped_spatial.md §4.3).
inline Rule typical(double eps, double alpha, double log_offset = 1e-5) {
  auto threshold = [=](const Dist& p) {
    double h = 0.0;
    for (double v : p)
      if (v > 0.0 || log_offset > 0.0) h -= v * std::log(v + log_offset);
    return std::min(eps, alpha * std::exp(-h));
  };
  return {"typical", [threshold](const Node& n) { return n.p[n.x] > threshold(n.p) ? 1.0 : 0.0; },
          [](const Node& n) { return n.p; }, exact_greedy};
}

// COOL-SD Eq. 5: G* = Norm([p - q f(.)]+), f(y) the rule's acceptance had y been drafted from the
// same q (only where q(y) > 0: elsewhere the term is p(y)).
inline Rule optimal(Rule r) {
  Rule o = r;
  o.name = r.name + "+G*";
  o.g = [f = r.f](const Node& n) {
    Dist g = n.p;
    for (size_t y = 0; y < n.p.size(); ++y) {
      if (!(n.q[y] > 0.0)) continue;
      Node m = n;
      m.x = static_cast<int>(y);
      g[y] = std::max(0.0, n.p[y] - n.q[y] * f(m));
    }
    return g;
  };
  return o;
}

// ---- LANTERN (Jang et al., 2025) and LANTERN++ -----------------------------------------------

// Every other code of a [V, dim] codebook, nearest first by Euclidean distance (LANTERN §4.2,
// ℓ2 as jadohu/LANTERN's generate_codebook.py); equal distances: smaller id first.
inline std::vector<int> latent_order(const std::vector<float>& codebook, int dim, int x) {
  const int V = static_cast<int>(codebook.size()) / dim;
  std::vector<double> d2(V, 0.0);
  for (int y = 0; y < V; ++y)
    for (int j = 0; j < dim; ++j) {
      const double diff = static_cast<double>(codebook[static_cast<size_t>(x) * dim + j]) -
                          codebook[static_cast<size_t>(y) * dim + j];
      d2[y] += diff * diff;
    }
  std::vector<int> order;
  for (int y = 0; y < V; ++y)
    if (y != x) order.push_back(y);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return d2[a] < d2[b]; });
  return order;
}

struct LanternConfig {
  int k = 1;
  enum class Budget { Delta, LambdaPaper, LambdaCode } budget = Budget::Delta;
  double delta = 0.1, lambda = 2.0;
  // Delta: S < δ (LANTERN Alg. 2 line 8). LambdaPaper: S < λ p(x) (LANTERN++ as COOL-SD §3.1
  // states it). LambdaCode: S <= (λ-1) p(x), i.e. p(x) + S <= λ p(x) (jadohu/LANTERN's code).
  // jadohu/LANTERN's code instead of the paper: k others in B_k, `<=`, the code's residual.
  bool code = false;
};

struct AcceptedSet {
  std::vector<int> members;  // A, nearest first (x excluded)
  double mass = 0.0;         // S = p(A)
  bool at_boundary = false;  // the first rejected prefix (or a kept one) had S == budget exactly
};

inline AcceptedSet lantern_set(const LanternConfig& c, const std::vector<float>& codebook, int dim,
                               const Dist& p, int x) {
  // Paper: B_k = x plus its k-1 nearest (LANTERN Alg. 2 line 4); code: nearest_latents[x, :k].
  const int others = c.code ? c.k : c.k - 1;
  const std::vector<int> order = latent_order(codebook, dim, x);
  double budget = c.delta;  // LANTERN Alg. 2 line 8: TV < δ
  bool strict = !c.code;    // paper `<`, code `<=`
  if (c.budget == LanternConfig::Budget::LambdaPaper) {
    budget = c.lambda * p[x];  // COOL-SD §3.1: Σ_{A \ x} P < λ P(x)
  } else if (c.budget == LanternConfig::Budget::LambdaCode) {
    budget = (c.lambda - 1.0) * p[x];  // jadohu/LANTERN: p(x) + S <= λ p(x)
    strict = false;
  }
  AcceptedSet a;
  for (int m = 0; m < others && m < static_cast<int>(order.size()); ++m) {
    const double s = a.mass + p[order[m]];  // moving b onto x costs exactly p(b) in TV
    if (s == budget) a.at_boundary = true;
    if (strict ? !(s < budget) : !(s <= budget)) break;  // the first violation ends A
    a.mass = s;
    a.members.push_back(order[m]);
  }
  return a;
}

// p_{k,δ}(.|x): A's mass moved onto x, A's members zeroed (LANTERN §4.3).
inline Dist lantern_distorted(const AcceptedSet& a, const Dist& p, int x) {
  Dist d = p;
  for (int b : a.members) d[b] = 0.0;
  d[x] = p[x] + a.mass;
  return d;
}

inline Rule lantern(const LanternConfig& c, std::vector<float> codebook, int dim) {
  Rule r;
  r.name = c.budget == LanternConfig::Budget::Delta ? "lantern" : "lantern++";
  if (c.code) r.name += "-code";
  r.f = [=](const Node& n) {
    const AcceptedSet a = lantern_set(c, codebook, dim, n.p, n.x);
    return ratio(n.p[n.x] + a.mass, n.q[n.x]);  // min(1, p_{k,δ}(x) / q(x))
  };
  r.g = [=](const Node& n) {
    const AcceptedSet a = lantern_set(c, codebook, dim, n.p, n.x);
    if (!c.code) return positive_part(lantern_distorted(a, n.p, n.x), n.q);  // LANTERN Alg. 1
    // jadohu/LANTERN evaluate_posterior: when A is non-empty, the k+1 nearest codes are zeroed in
    // the target (dynamic tree, one-hot q, with x) or in q (static tree, not renormalised).
    const std::vector<int> order = latent_order(codebook, dim, n.x);
    const size_t zeroed = a.members.empty() ? 0 : std::min<size_t>(c.k + 1, order.size());
    if (n.one_hot) {
      Dist g = positive_part(n.p, n.q);
      g[n.x] = 0.0;
      for (size_t m = 0; m < zeroed; ++m) g[order[m]] = 0.0;
      return g;
    }
    Dist q = n.q;
    for (size_t m = 0; m < zeroed; ++m) q[order[m]] = 0.0;
    return positive_part(n.p, q);
  };
  r.greedy = [=](const Node& n) {
    // LANTERN §4.3: x survives iff it is the argmax of p_{k,δ}(.|x). The code only raises p(x).
    const AcceptedSet a = lantern_set(c, codebook, dim, n.p, n.x);
    Dist d = c.code ? n.p : lantern_distorted(a, n.p, n.x);
    d[n.x] = n.p[n.x] + a.mass;
    return first_argmax(d) == n.x;
  };
  return r;
}

// ---- GSD (So et al., 2025) ----------------------------------------------------------------------

struct GsdConfig {
  int g = 10;
  double d = 0.5, delta = 0.15;
  bool code = false;      // junhyukso/GSD's VERIFY_GSD instead of Algorithm 3
  bool mirrored = false;  // a deliberate error for tests of the tests: p sorted descending
};

// The cluster C(x), or nullopt-like empty when the code's window slice is empty.
inline std::vector<int> gsd_cluster(const GsdConfig& c, const std::vector<float>& emb, int dim,
                                    const Dist& p, int x) {
  const int V = static_cast<int>(p.size());
  // Algorithm 3: p sorted ascending (as the code's logits.sort()); equal p: smaller id first.
  std::vector<int> sorted(V);
  std::iota(sorted.begin(), sorted.end(), 0);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](int a, int b) { return c.mirrored ? p[a] > p[b] : p[a] < p[b]; });
  const int r = static_cast<int>(std::find(sorted.begin(), sorted.end(), x) - sorted.begin());
  const int half = c.g / 2;
  // p_sort_idx[r - G//2 : r + G//2]; the code's negative start gives an empty slice.
  if (c.code && r - half < 0) return {};
  const int lo = std::max(0, r - half), hi = std::min(V, r + half);
  auto dist2 = [&](int y) {
    double s = 0.0;
    for (int j = 0; j < dim; ++j) {
      const double diff = static_cast<double>(emb[static_cast<size_t>(x) * dim + j]) -
                          emb[static_cast<size_t>(y) * dim + j];
      s += diff * diff;
    }
    return s;
  };
  std::vector<int> cl;
  if (!c.code) cl.push_back(x);  // Alg. 3: x is always in its own cluster
  for (int m = lo; m < hi; ++m) {
    const int y = sorted[m];
    if (!c.code && y == x) continue;
    const double dp = std::fabs(p[y] - p[x]), dd = dist2(y);
    const bool keep = c.code ? (dp < c.delta && dd < c.d)    // code: keep if < thresholds
                             : !(dp > c.delta || dd > c.d);  // Alg. 3 lines 9-10: pop if >
    if (keep) cl.push_back(y);
  }
  return cl;
}

inline Rule gsd(const GsdConfig& c, std::vector<float> emb, int dim) {
  Rule r;
  r.name = c.code ? "gsd-code" : "gsd";
  r.f = [=](const Node& n) {
    const std::vector<int> cl = gsd_cluster(c, emb, dim, n.p, n.x);
    double pc = 0.0, qc = 0.0;
    for (int y : cl) {
      pc += n.p[y];
      qc += n.q[y];
    }
    if (cl.empty() || !(qc > 0.0)) return 0.0;  // the code's 0/0 = NaN fails `r < ...`
    return ratio(pc, qc);                       // Eq. 4: min(1, p(C)/q(C))
  };
  r.g = [](const Node& n) { return positive_part(n.p, n.q); };  // Alg. 3 line 17 (SJD's)
  r.greedy = exact_greedy;
  return r;
}

}  // namespace tessera::paper
