// Exact analysis of the speculative loop on the micro models (tests/fixtures/spec: a 4-token
// vocabulary, 2x2 grid, so all 4^4 sequences can be enumerated), shared by test_spec_loop.cpp and
// test_spec_paths.cpp: model conditionals, the target joint, Pearson's test with its power, and the
// output distribution of one relaxed round computed from the papers' rules (tests/paper_rules.h),
// not from the engine's.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "decode/guidance.h"
#include "io/safetensors.h"
#include "paper_rules.h"
#include "sampling/sampler.h"
#include "stat_tests.h"
#include "tessera/tessera.h"

namespace tessera::spec_test {

inline const std::string kSpec = std::string(TESSERA_FIXTURES) + "/spec/";

using Seq = std::vector<int32_t>;
using Joint = std::map<Seq, double>;

constexpr double kAlpha = 1e-3;  // significance of every goodness-of-fit test
constexpr double kTv = 0.01;     // departure the lossless tests must catch ...
constexpr double kPower = 0.9;   // ... with at least this probability

struct ChiSquare {
  double stat = 0.0, p_value = 1.0;
  int df = 0;
  int impossible = 0;        // samples of sequences with probability 0
  double pooled_mass = 0.0;  // expected mass of the pooled cells (expected count < 5)
};

// Pearson's test of `samples` against `expected` (sequence -> probability), cells with expected
// count < 5 pooled.
inline ChiSquare chi_square(const Joint& expected, const std::vector<Seq>& samples) {
  std::map<Seq, int64_t> counts;
  for (const auto& s : samples) counts[s]++;
  ChiSquare r;
  const double n = static_cast<double>(samples.size());
  double pooled_e = 0.0, pooled_o = 0.0;
  int cells = 0;
  for (const auto& [seq, p] : expected) {
    const double e = p * n;
    const double o = counts.count(seq) ? static_cast<double>(counts[seq]) : 0.0;
    if (p <= 0.0) {
      r.impossible += static_cast<int>(o);
      continue;
    }
    if (e < 5.0) {
      pooled_e += e;
      pooled_o += o;
      continue;
    }
    r.stat += (o - e) * (o - e) / e;
    ++cells;
  }
  if (pooled_e > 0.0) {
    r.stat += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
    ++cells;
  }
  r.pooled_mass = pooled_e / n;
  for (const auto& [seq, c] : counts)
    if (!expected.count(seq)) r.impossible += static_cast<int>(c);
  r.df = cells - 1;
  r.p_value = test_stats::gamma_q(r.df / 2.0, r.stat / 2.0);
  return r;
}

// The cells chi_square would use for n samples of `expected`: (df, pooled mass).
inline std::pair<int, double> cells_at(const Joint& expected, double n) {
  int cells = 0;
  double pooled = 0.0;
  for (const auto& [seq, p] : expected) {
    if (p <= 0.0) continue;
    if (p * n < 5.0)
      pooled += p;
    else
      ++cells;
  }
  return {cells + (pooled > 0.0 ? 1 : 0) - 1, pooled};
}

// Guaranteed power of the test at n samples against any departure of TV >= ε (stat_tests.h): the
// pooled mass is taken off ε, as a departure inside the pooled cells is invisible to the test.
inline double power_at(const Joint& expected, double n, double eps) {
  const auto [df, pooled] = cells_at(expected, n);
  return test_stats::chi_square_power(n, df, std::max(0.0, eps - pooled), kAlpha);
}

// The smallest multiple of `step` samples with power_at >= power.
inline int samples_for(const Joint& expected, double eps, double power, int step) {
  int n = step;
  while (power_at(expected, n, eps) < power) n += step;
  return n;
}

inline double total_variation(const Joint& a, const Joint& b) {
  double tv = 0.0;
  Joint all = a;
  for (const auto& [s, p] : b) all.emplace(s, 0.0);
  for (const auto& [s, unused] : all) {
    const double pa = a.count(s) ? a.at(s) : 0.0, pb = b.count(s) ? b.at(s) : 0.0;
    tv += std::fabs(pa - pb);
  }
  return tv / 2.0;
}

inline Joint empirical(const std::vector<Seq>& samples) {
  Joint m;
  for (const auto& s : samples) m[s] += 1.0 / samples.size();
  return m;
}

// The next-token distribution of a model (with CFG, its interval, temperature, top-k, top-p) after
// a prefix, memoised: the "P(.|x_{<i})" and "Q(.|x_{<i})" of the analysis.
class Conditionals {
 public:
  Conditionals(Pipeline& pipe, int cls, const SamplingOptions& s)
      : pipe_(pipe), cls_(cls), params_(to_sampling_params(s)) {}
  const std::vector<float>& operator()(const Seq& prefix) {
    auto it = memo_.find(prefix);
    if (it != memo_.end()) return it->second;
    const int V = pipe_.config().gpt.vocab_size;
    const size_t last = prefix.size() * V;
    const auto cond = pipe_.forward_logits(Condition::label(cls_), prefix);
    std::vector<float> probs(V);
    std::span<const float> c(cond.data() + last, V), u;
    std::vector<float> uncond;
    if (params_.guided(static_cast<int>(prefix.size()))) {
      uncond = pipe_.forward_logits(Condition::unconditional(), prefix);
      u = {uncond.data() + last, static_cast<size_t>(V)};
    }
    target_distribution(c, u, params_.cfg_scale, params_, probs);
    return memo_[prefix] = probs;
  }
  paper::Dist dist(const Seq& prefix) {
    const auto& p = (*this)(prefix);
    return {p.begin(), p.end()};
  }

 private:
  Pipeline& pipe_;
  int cls_;
  SamplingParams params_;
  std::map<Seq, std::vector<float>> memo_;
};

// The joint distribution of all sequences of length n under `cond`, extending `prefix` (with
// probability `w`) token by token.
inline void enumerate_joint(Conditionals& cond, const Seq& prefix, double w, int n, Joint& out) {
  if (static_cast<int>(prefix.size()) == n) {
    if (w > 0.0) out[prefix] += w;
    return;
  }
  const auto p = cond(prefix);
  for (size_t y = 0; y < p.size(); ++y) {
    if (p[y] <= 0.0f) continue;
    Seq next = prefix;
    next.push_back(static_cast<int32_t>(y));
    enumerate_joint(cond, next, w * p[y], n, out);
  }
}

// n images of class `cls`, from `seeds` independent seeds (n / seeds each): one i.i.d. sample.
inline std::vector<Seq> generate(Pipeline& pipe, int cls, GenerateOptions o, int n, int seeds = 1) {
  std::vector<Seq> all;
  for (int s = 0; s < seeds; ++s) {
    const int m = n / seeds + (s < n % seeds ? 1 : 0);
    std::vector<Condition> conds(m, Condition::label(cls));
    auto part = pipe.generate(conds, o);
    all.insert(all.end(), part.begin(), part.end());
    o.seed = o.seed * 6364136223846793005ULL + 1442695040888963407ULL;
  }
  return all;
}

inline GenerateOptions sampling_options(const std::string& method, bool draft_model = true) {
  GenerateOptions o;
  o.sampling.cfg_scale = 2.0f;
  o.sampling.top_k = 3;
  o.sampling.top_p = 0.9f;
  o.sampling.temperature = 1.0f;
  o.seed = 20261123;
  o.batch = 1000;
  o.spec.method = method;
  if (draft_model && method != "vanilla" && method != "sjd")
    o.spec.draft_model = kSpec + "micro_draft";
  return o;
}

// The micro target and draft, loaded once per suite (single-threaded: the tests' timings).
class MicroModels : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    LoadOptions lo;
    lo.load_decoder = false;
    lo.threads = 1;
    target_ = Pipeline::load(kSpec + "micro_target", lo).release();
    draft_ = Pipeline::load(kSpec + "micro_draft", lo).release();
  }
  static void TearDownTestSuite() {
    delete target_;
    delete draft_;
    target_ = draft_ = nullptr;
  }
  static Joint target_joint(int cls, const SamplingOptions& s) {
    Conditionals p(*target_, cls, s);
    Joint joint;
    enumerate_joint(p, {}, 1.0, target_->config().gpt.n_image_tokens(), joint);
    return joint;
  }
  static int n_tokens() { return target_->config().gpt.n_image_tokens(); }
  static inline Pipeline* target_ = nullptr;
  static inline Pipeline* draft_ = nullptr;
};

// The micro target's raw VQ codebook (LANTERN's latent space) and its GPT input embeddings (GSD's
// default distance embedding), [V, dim] row-major.
struct Table {
  std::vector<float> data;
  int dim = 0;
};
inline Table load_table(const std::string& file, const std::string& name, int V) {
  const SafeTensorsFile f = SafeTensorsFile::open(kSpec + "micro_target/" + file);
  Table t;
  t.dim = static_cast<int>(f.get(name).shape[1]);
  t.data = f.read_f32(name);
  t.data.resize(static_cast<size_t>(V) * t.dim);
  return t;
}
inline Table micro_codebook() {
  return load_table("vq.safetensors", "quantize.embedding.weight", 4);
}
inline Table micro_token_embeddings() {
  return load_table("gpt.safetensors", "tok_embeddings.weight", 4);
}

// LANTERN's rule (tests/paper_rules.h) over the micro target's codebook.
inline paper::Rule micro_lantern(int k, paper::LanternConfig::Budget budget, double delta,
                                 double lambda, bool code = false) {
  const Table cb = micro_codebook();
  paper::LanternConfig c;
  c.k = k;
  c.budget = budget;
  c.delta = delta;
  c.lambda = lambda;
  c.code = code;
  return paper::lantern(c, cb.data, cb.dim);
}

// ---- one round of a relaxed rule, analysed exactly --------------------------------------------

struct RoundAnalysis {
  Joint output;        // joint over the whole grid: x0 exact, one round, then target
  double tv = 0.0;     // TV(output, target joint), exact
  double bound = 0.0;  // COOL-SD Eq. 4, averaged over x0 ~ P
};

// Where one round's drafts come from: a draft model's Q (drafted from Q, verified against Q), or
// null: Jacobi's fresh window, uniform over the vocabulary with one-hot q = δ_x (SJD 'random').
using NodeVisitor = std::function<void(const paper::Node&, double weight)>;

// Output distribution of one round of relaxed SD (COOL-SD Alg. 1) after x0, computed from the
// paper rule, and Eq. 4's bound. `visit` sees every draft node with its probability of being
// drafted.
// One round's drafts: the distribution the draft after `prefix` is drawn from, and whether each
// draft is one-hot (q = δ_x: Jacobi's random window, Medusa's deterministic candidates) rather than
// drawn from q = that distribution.
struct RoundDrafts {
  std::function<paper::Dist(const Seq&)> draw;
  bool one_hot = false;
};

inline RoundAnalysis analyse_round(Conditionals& P, const RoundDrafts& drafts,
                                   const paper::Rule& rule, int L, int n_tokens,
                                   const Joint& target, const NodeVisitor& visit = {}) {
  RoundAnalysis a;
  const paper::Dist p0 = P.dist({});
  const int V = static_cast<int>(p0.size());
  const auto& draw = drafts.draw;
  auto node = [&](const Seq& prefix, int token, int depth) {
    paper::Node n;
    n.p = P.dist(prefix);
    n.one_hot = drafts.one_hot;
    if (!drafts.one_hot) {
      n.q = draw(prefix);
    } else {
      n.q.assign(V, 0.0);
      n.q[token] = 1.0;
    }
    n.x = token;
    n.i = depth;
    n.L = L;
    return n;
  };
  for (int x0 = 0; x0 < V; ++x0) {
    if (p0[x0] <= 0.0) continue;
    // Recursion over accepted drafts x_{1:i} with weight P(x0) Q(x_{1:i}) prod f.
    std::function<void(const Seq&, double, int)> walk = [&](const Seq& prefix, double w,
                                                            int depth) {
      if (w <= 0.0) return;
      if (depth > L) {  // every draft accepted: the bonus and the rest from the target
        enumerate_joint(P, prefix, w, n_tokens, a.output);
        return;
      }
      const paper::Dist d = draw(prefix);
      const paper::Dist p = P.dist(prefix);
      // Rejected mass redistributed by G_x~ (LANTERN's G depends on the rejected token):
      // sum_x~ (1 - f(x~)) D(x~) G_x~(.), D the drafting distribution.
      std::vector<double> redistributed(V, 0.0), accepted(V, 0.0);
      for (int y = 0; y < V; ++y) {
        if (d[y] <= 0.0) continue;
        const paper::Node n = node(prefix, y, depth);
        if (visit) visit(n, w * d[y]);
        const double f = rule.f(n);
        accepted[y] = d[y] * f;
        Seq next = prefix;
        next.push_back(y);
        walk(next, w * d[y] * f, depth + 1);
        if (f >= 1.0) continue;
        const paper::Dist g = paper::effective_resampling(rule.g(n), n.p);
        for (int z = 0; z < V; ++z) redistributed[z] += (1.0 - f) * d[y] * g[z];
      }
      double term = 0.0;
      for (int y = 0; y < V; ++y) term += std::fabs(accepted[y] - p[y] + redistributed[y]);
      a.bound += 0.5 * w * term;  // Eq. 4's term at this node, weighted by reaching it
      for (int y = 0; y < V; ++y) {
        if (redistributed[y] <= 0.0) continue;
        Seq next = prefix;
        next.push_back(y);
        enumerate_joint(P, next, w * redistributed[y], n_tokens, a.output);
      }
    };
    walk({x0}, p0[x0], 1);
  }
  a.tv = total_variation(a.output, target);
  return a;
}

inline RoundAnalysis analyse_round(Conditionals& P, Conditionals* Q, const paper::Rule& rule, int L,
                                   int n_tokens, const Joint& target,
                                   const NodeVisitor& visit = {}) {
  const int V = static_cast<int>(P.dist({}).size());
  RoundDrafts d;
  d.one_hot = Q == nullptr;
  d.draw = [Q, V](const Seq& prefix) { return Q ? Q->dist(prefix) : paper::Dist(V, 1.0 / V); };
  return analyse_round(P, d, rule, L, n_tokens, target, visit);
}

// ---- one round of a relaxed rule on a draft tree, analysed exactly ---------------------------

// A static draft tree as the analysis sees it: children[u] lists node u's children in rank order
// (index nodes() stands for the root), depth[u] its depth. Written from the shape's definition, not
// read from the engine's TreeShape.
struct PlainTree {
  std::vector<std::vector<int>> children;
  std::vector<int> depth;
  int nodes() const { return static_cast<int>(depth.size()); }
};

// `kary:B1,...,BD`: B1 children of the root, B2 of each of those, ...; nodes deeper than L left
// out (the loop cuts a tree at the round's depth).
inline PlainTree kary_tree(const std::vector<int>& branching, int L) {
  PlainTree t;
  t.children.emplace_back();  // the root, moved to the end below
  std::vector<int> level = {-1};
  for (int d = 1; d <= static_cast<int>(branching.size()) && d <= L; ++d) {
    std::vector<int> next;
    for (int parent : level)
      for (int r = 0; r < branching[d - 1]; ++r) {
        const int u = t.nodes();
        t.depth.push_back(d);
        t.children.emplace_back();
        (parent < 0 ? t.children[0] : t.children[parent + 1]).push_back(u);
        next.push_back(u);
      }
    level = next;
  }
  // children[0] was the root's: store node u's list at u and the root's at nodes().
  std::vector<std::vector<int>> c(t.children.begin() + 1, t.children.end());
  c.push_back(t.children[0]);
  t.children = c;
  return t;
}

// How a tree's children are drafted: sampled from Q without replacement (EAGLE-1's sampling, the
// engine's static trees: child r from Q without children 0..r-1, renormalised), or Q's top-k
// (deterministic, one-hot q: EAGLE-2's dynamic trees, Medusa).
enum class TreeChildren { WithoutReplacement, TopK };

// Deliberately wrong sibling conventions, for tests of the tests.
enum class SiblingMutation {
  None,
  KeepTarget,  // the next sibling is tested against the unmodified p, not the residual G
  KeepDraft,   // the next sibling is tested against the parent's full Q, not Q without the tried
};

// Output distribution of one round of a relaxed rule on a draft tree after x0, computed from the
// paper rule (tests/paper_rules.h) with the sibling convention of SpecInfer's multi-draft walk as
// jadohu/LANTERN's evaluate_posterior_v1 applies it to EAGLE trees (notes relaxed_sd.md §1.5,
// COOL-SD on trees §3): at a node the children are tested in rank order; child j is tested with
// f(x_j; p_j, q_j, depth) where p_0 = P and q_0 = Q; a rejection sets p_{j+1} = Norm(G(x_j; p_j,
// q_j)) and q_{j+1} = q_j without x_j, renormalised (sampling without replacement); the first
// accepted child continues the walk at its subtree; when every child is rejected (or no token
// with mass is left to draft) the next token is drawn from the last p_j. `bound` is COOL-SD Eq. 4
// summed over the tree's states: the expected TV between each node's one-step output and P,
// which bounds the joint's TV by the same hybrid argument as for chains.
//
// Heads' children (Medusa's, Hawk's: drafted from the root's features, not the parent's path)
// are given instead of Q: child r of a node at depth d is drawn from its own q, independently of
// its siblings (Hawk Eq. 6's candidates, DraftNode::with_replacement: tested against that q, which
// a rejection leaves as it is), or is one given token with one-hot q (top candidates, Medusa's).
struct HeadsChild {
  paper::Dist q;   // sampled: the distribution it is drawn from
  int token = -1;  // >= 0: one-hot at this token
};
using HeadsChildren = std::function<std::vector<HeadsChild>(const Seq& prefix, int depth)>;

inline RoundAnalysis analyse_tree_walk(Conditionals& P, Conditionals* Q, const HeadsChildren* heads,
                                       const paper::Rule& rule, const PlainTree& tree,
                                       TreeChildren kind, int L, int n_tokens, const Joint& target,
                                       SiblingMutation mutation) {
  RoundAnalysis a;
  const paper::Dist p0 = P.dist({});
  const int V = static_cast<int>(p0.size());
  auto has_mass = [](const paper::Dist& d) {
    return std::any_of(d.begin(), d.end(), [](double v) { return v > 0.0; });
  };
  std::function<void(const Seq&, double, int)> at_node = [&](const Seq& prefix, double w, int u) {
    if (w <= 0.0) return;
    const std::vector<int>& kids = tree.children[u < 0 ? tree.nodes() : u];
    if (kids.empty()) {  // a leaf: the bonus and the rest from the target
      enumerate_joint(P, prefix, w, n_tokens, a.output);
      return;
    }
    const int depth = tree.depth[kids[0]];
    const paper::Dist p = P.dist(prefix), q = Q ? Q->dist(prefix) : paper::Dist(V, 0.0);
    const std::vector<HeadsChild> given =
        heads ? (*heads)(prefix, depth) : std::vector<HeadsChild>{};
    // Q's ranking for deterministic children: most probable first, ties by smaller id.
    std::vector<int> ranked(V);
    std::iota(ranked.begin(), ranked.end(), 0);
    std::stable_sort(ranked.begin(), ranked.end(), [&](int x, int y) { return q[x] > q[y]; });
    paper::Dist step(V, 0.0);  // this node's one-step output: P(next committed token = y)
    // Sibling j of the walk, reached with probability wj (relative to the node), against p_j.
    std::function<void(size_t, const paper::Dist&, const paper::Dist&, double)> sibling =
        [&](size_t j, const paper::Dist& pj, const paper::Dist& qj, double wj) {
          if (wj <= 0.0) return;
          std::vector<int> tokens;  // the tokens child j can be, with their draft probability
          paper::Dist draw(V, 0.0);
          if (heads) {
            if (j < kids.size() && j < given.size()) {
              const HeadsChild& c = given[j];
              if (c.token >= 0) {
                tokens.push_back(c.token);
                draw[c.token] = 1.0;
              } else {
                for (int y = 0; y < V; ++y)
                  if (c.q[y] > 0.0) tokens.push_back(y), draw[y] = c.q[y];
              }
            }
          } else if (j < kids.size()) {
            if (kind == TreeChildren::WithoutReplacement) {
              for (int y = 0; y < V; ++y)
                if (qj[y] > 0.0) tokens.push_back(y), draw[y] = qj[y];
            } else if (q[ranked[j]] > 0.0) {
              tokens.push_back(ranked[j]);
              draw[ranked[j]] = 1.0;
            }
          }
          if (tokens.empty()) {  // every child rejected: the next token from the residual
            for (int z = 0; z < V; ++z) {
              if (pj[z] <= 0.0) continue;
              step[z] += wj * pj[z];
              Seq next = prefix;
              next.push_back(z);
              enumerate_joint(P, next, w * wj * pj[z], n_tokens, a.output);
            }
            return;
          }
          for (int y : tokens) {
            paper::Node n;
            n.p = pj;
            n.x = y;
            n.i = depth;
            n.L = L;
            n.one_hot = heads ? given[j].token >= 0 : kind == TreeChildren::TopK;
            if (n.one_hot) {
              n.q.assign(V, 0.0);
              n.q[y] = 1.0;
            } else if (heads) {
              n.q = given[j].q;
            } else {
              n.q = mutation == SiblingMutation::KeepDraft ? q : qj;
            }
            const double f = rule.f(n), reach = wj * draw[y];
            step[y] += reach * f;
            Seq next = prefix;
            next.push_back(y);
            at_node(next, w * reach * f, kids[j]);
            if (f >= 1.0) continue;
            const paper::Dist pn = mutation == SiblingMutation::KeepTarget
                                       ? pj
                                       : paper::effective_resampling(rule.g(n), pj);
            paper::Dist qn = qj;
            if (!heads && kind == TreeChildren::WithoutReplacement) {
              qn[y] = 0.0;
              if (has_mass(qn)) {
                const double m = std::accumulate(qn.begin(), qn.end(), 0.0);
                for (double& v : qn) v /= m;
              }
            }
            sibling(j + 1, pn, qn, reach * (1.0 - f));
          }
        };
    sibling(0, p, q, 1.0);
    double term = 0.0;
    for (int y = 0; y < V; ++y) term += std::fabs(step[y] - p[y]);
    a.bound += 0.5 * w * term;
  };
  for (int x0 = 0; x0 < V; ++x0)
    if (p0[x0] > 0.0) at_node({x0}, p0[x0], -1);
  a.tv = total_variation(a.output, target);
  return a;
}

inline RoundAnalysis analyse_tree_round(Conditionals& P, Conditionals& Q, const paper::Rule& rule,
                                        const PlainTree& tree, TreeChildren kind, int L,
                                        int n_tokens, const Joint& target,
                                        SiblingMutation mutation = SiblingMutation::None) {
  return analyse_tree_walk(P, &Q, nullptr, rule, tree, kind, L, n_tokens, target, mutation);
}

// The same walk on a tree of heads' drafts (children given per node, above).
inline RoundAnalysis analyse_heads_round(Conditionals& P, const HeadsChildren& heads,
                                         const paper::Rule& rule, const PlainTree& tree, int L,
                                         int n_tokens, const Joint& target,
                                         SiblingMutation mutation = SiblingMutation::None) {
  return analyse_tree_walk(P, nullptr, &heads, rule, tree, TreeChildren::TopK, L, n_tokens, target,
                           mutation);
}

// ---- one round of a relaxed method: the loop against the analysis -----------------------------

// Samples per one-round test. Their power: stat_tests.h; each test prints the TV it detects with
// power 0.9 (about 0.026 at df 20).
constexpr int kRelaxedSamples = 24000;

struct RelaxedCase {
  std::string label;
  GenerateOptions o;  // method, its params, sampling, draft model (empty: Jacobi drafts)
  paper::Rule rule;   // the same method from its paper
  int cls = 1;
  // A draft tree instead of a chain: `kary:tree[0],tree[1],...` (the caller sets o.spec.tree),
  // children drawn without replacement from the draft model; analysed by analyse_tree_round
  // under `siblings` (None: the walk's convention; else a deliberately wrong one).
  std::vector<int> tree = {};
  SiblingMutation siblings = SiblingMutation::None;
};

struct RoundCheck {
  RoundAnalysis analysis;
  ChiSquare chi;
  std::vector<Seq> samples;
  Joint target;
  int L = 0;
};

inline int round_depth(const GenerateOptions& o, int n_tokens) {
  const int depth = o.spec.draft_model.empty() ? o.spec.draft_len - 1 : o.spec.draft_len;
  return std::min(depth, n_tokens - 2);  // drafts are bounded by the image (x0 comes first)
}

inline RoundAnalysis analyse_case(Pipeline& target, Pipeline& draft, const RelaxedCase& c,
                                  const paper::Rule& rule, const Joint& joint, int L,
                                  const NodeVisitor& visit = {}) {
  Conditionals P(target, c.cls, c.o.sampling), Q(draft, c.cls, c.o.sampling);
  if (!c.tree.empty())
    return analyse_tree_round(P, Q, rule, kary_tree(c.tree, L), TreeChildren::WithoutReplacement, L,
                              target.config().gpt.n_image_tokens(), joint, c.siblings);
  return analyse_round(P, c.o.spec.draft_model.empty() ? nullptr : &Q, rule, L,
                       target.config().gpt.n_image_tokens(), joint, visit);
}

// One round of c's method (max_rounds = 1): the loop's samples must follow the paper's analysis,
// whose TV from the target is positive and within COOL-SD Eq. 4.
inline RoundCheck check_round(Pipeline& target, Pipeline& draft, RelaxedCase c,
                              int n = kRelaxedSamples, const NodeVisitor& visit = {}) {
  SCOPED_TRACE(c.label);
  if (c.o.spec.draft_len == 0) c.o.spec.draft_len = c.o.spec.draft_model.empty() ? 3 : 2;
  c.o.spec.max_rounds = 1;
  const int N = target.config().gpt.n_image_tokens();
  RoundCheck r;
  r.L = round_depth(c.o, N);
  {
    Conditionals P(target, c.cls, c.o.sampling);
    enumerate_joint(P, {}, 1.0, N, r.target);
  }
  r.analysis = analyse_case(target, draft, c, c.rule, r.target, r.L, visit);
  double total = 0.0;
  for (const auto& [s, p] : r.analysis.output) total += p;
  EXPECT_NEAR(total, 1.0, 1e-5);
  EXPECT_GT(r.analysis.tv, 1e-3);                     // the relaxation changes the output ...
  EXPECT_LE(r.analysis.tv, r.analysis.bound + 1e-9);  // ... within Theorem 2's bound (Eq. 4)
  r.samples = generate(target, c.cls, c.o, n, 3);
  r.chi = chi_square(r.analysis.output, r.samples);
  const double detectable = test_stats::detectable_tv(n, r.chi.df, kAlpha, kPower);
  std::printf("  %-28s n %d df %d p %.3g  TV(analysis, target) %.4f  Eq.4 %.4f  detects TV %.3f\n",
              c.label.c_str(), n, r.chi.df, r.chi.p_value, r.analysis.tv, r.analysis.bound,
              detectable + r.chi.pooled_mass);
  EXPECT_EQ(r.chi.impossible, 0);
  EXPECT_GT(r.chi.p_value, kAlpha) << "chi2 " << r.chi.stat << " df " << r.chi.df;
  // The measured distance: the empirical TV is biased upwards by sampling noise (about
  // sqrt(cells / n)), so it is held to the bound plus that allowance.
  EXPECT_LE(total_variation(empirical(r.samples), r.target), r.analysis.bound + 0.05);
  return r;
}

// Whether a chi-square test rejects: a small p-value or samples the expected law cannot produce.
inline bool rejects(const ChiSquare& c) {
  return c.p_value < kAlpha || c.impossible > 0;
}

// The samples of `done` tested against the analysis of another rule (a test of the test).
inline RoundCheck recheck(Pipeline& target, Pipeline& draft, const RelaxedCase& c,
                          const paper::Rule& rule, const RoundCheck& done) {
  RoundCheck r;
  r.L = done.L;
  r.target = done.target;
  r.analysis = analyse_case(target, draft, c, rule, done.target, done.L);
  r.chi = chi_square(r.analysis.output, done.samples);
  return r;
}

}  // namespace tessera::spec_test
