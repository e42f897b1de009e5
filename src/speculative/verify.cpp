#include "speculative/verify.h"

#include <algorithm>
#include <numeric>

#include "sampling/sampler.h"
#include "tessera/error.h"

namespace tessera::speculative {

bool is_chain(const DraftTree& tree) {
  for (size_t i = 0; i < tree.size(); ++i)
    if (tree[i].parent != static_cast<int>(i) - 1 || tree[i].depth != static_cast<int>(i) + 1)
      return false;
  return true;
}

int tree_depth(const DraftTree& tree) {
  int depth = 0;
  for (size_t i = 0; i < tree.size(); ++i) {
    const int parent = tree[i].parent;
    check(parent >= -1 && parent < static_cast<int>(i) &&
              tree[i].depth == (parent < 0 ? 1 : tree[parent].depth + 1),
          "internal: a draft tree's nodes must follow their parents, one depth below them");
    depth = std::max(depth, tree[i].depth);
  }
  return depth;
}

int drafted_nodes(const DraftTree& tree) {
  return static_cast<int>(std::count_if(
      tree.begin(), tree.end(), [](const DraftNode& node) { return node.token != kTokenMissing; }));
}

int drafted_depth(const DraftTree& tree) {
  int depth = 0;
  for (const DraftNode& node : tree)
    if (node.token != kTokenMissing) depth = std::max(depth, node.depth);
  return depth;
}

namespace {

void bump(std::vector<int64_t>& v, int depth) {
  if (static_cast<int>(v.size()) < depth) v.resize(depth, 0);
  v[depth - 1]++;
}

}  // namespace

VerifyOutcome verify_draft(const VerifySettings& s, const DraftTree& tree,
                           const std::function<std::span<const float>(int)>& dist,
                           const CounterRng& rng, int64_t round, int base_token,
                           ImageStats& stats) {
  check(s.rule != nullptr, "internal: verification without a rule");
  VerifyOutcome out;
  std::span<const float> p0 = dist(0);
  std::vector<float> p(p0.begin(), p0.end());  // current target (or residual) distribution
  std::vector<float> residual(p.size()), q_work;
  int node = -1, depth = 1;
  for (;;) {
    bool accepted = false;
    bool modified = false;  // p is a residual (a sibling was rejected at this depth)
    int sibling = 0;
    q_work.clear();
    for (size_t c = 0; c < tree.size(); ++c) {
      if (tree[c].parent != node) continue;
      const DraftNode& d = tree[c];
      check(d.q_row < 0, "internal: a draft distribution left on the device verified on the host");
      NodeView v;
      v.token = d.token;
      v.position = depth;
      v.draft_len = s.draft_len;
      v.p = p;
      v.q = d.with_replacement || q_work.empty() ? std::span<const float>(d.q)
                                                 : std::span<const float>(q_work);
      const int token_index = base_token + depth - 1;
      bump(stats.proposed, depth);
      bool ok;
      if (s.greedy) {
        ok = !modified && s.rule->greedy_accept(v);
      } else {
        const double u = rng.uniform(token_index, stream_id(Stream::Accept, round, sibling));
        ok = u < s.rule->accept_probability(v);
      }
      if (ok) {
        bump(stats.accepted, depth);
        out.accepted.push_back(static_cast<int>(c));
        node = static_cast<int>(c);
        const std::span<const float> pn = dist(node + 1);
        p.assign(pn.begin(), pn.end());
        accepted = true;
        break;
      }
      if (!s.greedy) {
        // p <- G (the rule's resampling distribution); falls back to p when G has no mass.
        std::fill(residual.begin(), residual.end(), 0.0f);
        s.rule->residual(v, residual);
        if (normalise(residual)) p.swap(residual);
        modified = true;
        // The next sibling was drawn from q without this token (sampling without replacement);
        // one-hot drafts and drafts drawn with replacement carry their own q.
        if (!d.q.empty() && !d.with_replacement) {
          if (q_work.empty()) q_work = d.q;
          q_work[d.token] = 0.0f;
          if (!normalise(q_work)) std::fill(q_work.begin(), q_work.end(), 0.0f);
        }
      }
      ++sibling;
    }
    if (!accepted) {
      out.rejected = sibling > 0;
      break;
    }
    ++depth;
  }
  const int token_index = base_token + static_cast<int>(out.accepted.size());
  if (s.greedy) {
    out.next_token = argmax(dist(out.accepted.empty() ? 0 : out.accepted.back() + 1));
  } else {
    out.next_token = sample_index(p, rng.uniform(token_index, stream_id(Stream::Resample, round)));
  }
  return out;
}

}  // namespace tessera::speculative
