#include "speculative/backend_verifier.h"

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "tessera/error.h"

namespace tessera::speculative {

BackendVerifier::BackendVerifier(Backend& backend, int vocab) : be_(backend), V_(vocab) {
  check(vocab >= 1, "internal: BackendVerifier without a vocabulary");
}

void BackendVerifier::stage(int rows, std::span<const DraftToVerify> drafts, bool greedy,
                            const DeviceDraftRows* device, int halves) {
  const int m = static_cast<int>(drafts.size()), width = rows - 1;
  check(rows >= 1 && halves >= 1, "internal: BackendVerifier::stage without a root row");
  m_ = m;
  rows_ = rows;
  greedy_ = greedy;
  any_q_ = false;
  bool on_device = false;
  int64_t device_tokens = 0;
  // Tokens rows are the tokens' words before the flag's; inputs, when given, mirror them.
  const int64_t token_rows = device && device->tokens.data ? device->tokens.numel() - 1 : 0;
  for (const DraftToVerify& c : drafts) {
    check(c.tree && static_cast<int>(c.tree->size()) <= width,
          "internal: BackendVerifier verifies drafts of at most the round's width");
    tree_depth(*c.tree);  // parents first, depths consistent
    for (const DraftNode& node : *c.tree) {
      any_q_ = any_q_ || !node.q.empty() || node.q_row >= 0;
      on_device = on_device || node.q_row >= 0;
      if (node.token == kTokenOnDevice) {
        check(token_rows > 0, "internal: draft tokens on a device without the drafter's tensor");
        check(node.token_row >= 0 && node.token_row < token_rows,
              "internal: a draft token's row outside the drafter's tokens");
        ++device_tokens;
      }
    }
  }
  check(!on_device || (device && device->q.data),
        "internal: draft rows on a device without the drafter's tensor");
  check(device_tokens == 0 || !device->inputs.data || device->inputs.numel() >= token_rows,
        "internal: draft inputs shorter than the drafter's tokens");
  tokens_on_device_ = device_tokens > 0;
  draft_counts_.clear();
  for (const DraftToVerify& c : drafts)
    draft_counts_.push_back(static_cast<int32_t>(c.tree->size()));
  any_carry_ =
      std::any_of(drafts.begin(), drafts.end(), [](const DraftToVerify& c) { return c.carry; });
  const size_t V = static_cast<size_t>(V_), n_rows = static_cast<size_t>(m) * rows,
               n_drafts = static_cast<size_t>(m) * width;
  Layout& a = at_;
  a.verdicts = 0;
  a.flag = aligned_offset(m * sizeof(DraftVerdict));
  a.carried = aligned_offset(a.flag + sizeof(int32_t));
  const size_t carried_end = a.carried + (any_carry_ ? n_drafts * sizeof(int32_t) : 0);
  a.nodes = aligned_offset(carried_end);
  const size_t nodes_end = a.nodes + n_drafts * sizeof(WalkNode);
  // The nodes come back only when the host lacks their tokens.
  a.back = tokens_on_device_ ? nodes_end : any_carry_ ? carried_end : a.flag + sizeof(int32_t);
  a.params = aligned_offset(nodes_end);
  a.images = aligned_offset(a.params + n_rows * sizeof(DeviceSampleParams));
  a.q_rows = aligned_offset(a.images + m * sizeof(RoundImage));
  a.moves = aligned_offset(a.q_rows + (on_device ? n_drafts * sizeof(int32_t) : 0));
  // Each device token goes to its walk node, and to its row of each half's inputs; the drafter's
  // error flag to this buffer's (so one read reports a failed draw or target row).
  a.node_moves = tokens_on_device_ ? device_tokens + 1 : 0;
  a.input_moves = device_tokens * halves;
  const size_t n_moves = static_cast<size_t>(a.node_moves + a.input_moves);
  a.q = aligned_offset(a.moves + 2 * n_moves * sizeof(int32_t));
  a.total = a.q + (any_q_ && !on_device ? n_drafts * V * sizeof(float) : 0);
  host_.assign(a.total, 0);  // zero verdicts and flag, zero padding drafts

  auto* params = reinterpret_cast<DeviceSampleParams*>(host_.data() + a.params);
  auto* images = reinterpret_cast<RoundImage*>(host_.data() + a.images);
  auto* nodes = reinterpret_cast<WalkNode*>(host_.data() + a.nodes);
  auto* q_rows = reinterpret_cast<int32_t*>(host_.data() + a.q_rows);
  auto* q = reinterpret_cast<float*>(host_.data() + a.q);
  // Pair k: from[k] a row of the drafter's tokens, to[k] an I32 index (of this buffer for the node
  // moves, of the target's inputs for the input moves).
  auto* from = reinterpret_cast<int32_t*>(host_.data() + a.moves);
  auto* to = from + n_moves;
  int64_t node_move = 0, input_move = a.node_moves;
  constexpr size_t kWord = sizeof(int32_t);
  static_assert(offsetof(WalkNode, token) % kWord == 0 && sizeof(WalkNode) % kWord == 0);
  for (int j = 0; j < m; ++j) {
    const DraftToVerify& c = drafts[j];
    const DraftTree& tree = *c.tree;
    // Row r predicts the token at its node's depth below the root (r on a chain); padding rows
    // are the root's.
    for (int r = 0; r < rows; ++r) {
      const int depth = r == 0 || r > static_cast<int>(tree.size()) ? 0 : tree[r - 1].depth;
      params[static_cast<size_t>(j) * rows + r] = device_sample_params(
          c.verifying, c.seed, c.image_index, static_cast<uint32_t>(c.base_token + depth));
    }
    RoundImage im;
    im.rule = c.rule.rule;
    if (im.rule.kind == WalkRule::Kind::Lantern) {
      check(c.rule.table && c.rule.table->vocab() == V_,
            "internal: LANTERN's table does not match the vocabulary");
      im.rule.lantern.table = table_on_backend(c.rule.table);
    }
    if (im.rule.kind == WalkRule::Kind::Gsd) {
      check(c.rule.embedding && im.rule.gsd.rows >= V_ && im.rule.gsd.dim > 0,
            "internal: GSD's embedding does not cover the vocabulary");
      // G* ranks the row with ids as floats (gsd_math.h).
      check(!im.rule.optimal || V_ <= kGsdMaxRankedVocab,
            "GSD: G* ranks at most 2^24 tokens on the device loop");
      im.rule.gsd.embedding = embedding_on_backend(c.rule.embedding, im.rule.gsd.dim);
    }
    im.seed = c.seed;
    im.image_index = c.image_index;
    im.round = c.round;
    im.base_token = static_cast<uint32_t>(c.base_token);
    im.drafts = static_cast<int32_t>(tree.size());
    im.draft_len = std::max(1, c.draft_len);
    im.carry = c.carry ? 1 : 0;
    // A draft made on the device has its rows there (q empty on the host).
    im.one_hot = on_device ? tree.empty()
                           : std::all_of(tree.begin(), tree.end(),
                                         [](const DraftNode& node) { return node.q.empty(); });
    images[j] = im;
    for (size_t d = 0; d < tree.size(); ++d) {
      const size_t slot = static_cast<size_t>(j) * width + d;
      const DraftNode& node = tree[d];
      WalkNode& w = nodes[slot];
      w.token = node.token;
      w.parent = node.parent;
      w.depth = node.depth;
      w.flags = (node.with_replacement ? WalkNode::kWithReplacement : 0) |
                (node.q.empty() && node.q_row < 0 ? WalkNode::kOneHot : 0);
      if (node.token == kTokenOnDevice) {
        from[node_move] = node.token_row;
        to[node_move++] = static_cast<int32_t>(
            (a.nodes + slot * sizeof(WalkNode) + offsetof(WalkNode, token)) / kWord);
        for (int h = 0; h < halves; ++h) {
          from[input_move] = node.token_row;
          to[input_move++] = static_cast<int32_t>((static_cast<size_t>(h) * m + j) * rows + d + 1);
        }
      }
      if (on_device) {  // padding slots and one-hot nodes (Jacobi's fresh ones) gather row 0,
                        // never read
        check(node.q_row < device->q.dim(0) && (node.q_row >= 0 || node.q.empty()),
              "internal: a round drafts on the device and the host at once");
        q_rows[slot] = std::max(node.q_row, 0);
        continue;
      }
      if (im.one_hot || node.q.empty()) continue;
      check(node.q.size() == V, "internal: a draft distribution of another vocabulary");
      std::memcpy(q + slot * V, node.q.data(), V * sizeof(float));
    }
  }
  if (tokens_on_device_) {
    from[node_move] = static_cast<int32_t>(device->tokens.numel() - 1);  // the draws' flag
    to[node_move++] = static_cast<int32_t>(a.flag / kWord);
  }
  check(node_move == a.node_moves && input_move == a.node_moves + a.input_moves,
        "internal: BackendVerifier token copies miscounted");
  Tensor used = grown_rows(be_, buffer_, DType::U8, static_cast<int64_t>(a.total), 1);
  be_.upload_into(host_.data(), used);
  const int64_t n_draft_rows = static_cast<int64_t>(n_drafts);
  // The device ops' buffers, grown here so that those ops allocate nothing.
  probs_round_ = Tensor{};
  if (m > 0) {
    probs_round_ = grown_rows(be_, probs_, DType::F32, static_cast<int64_t>(n_rows), V_);
    grown_rows(be_, scratch_, DType::F32, m, verify_scratch(V_));
  }
  // The drafter's rows in this round's order are gathered, and its tokens copied, by the pass's
  // device ops (gather_drafts).
  q_from_ = Tensor{};
  if (on_device) {
    q_ = grown_rows(be_, gathered_q_, DType::F32, n_draft_rows, V_);
    if (n_draft_rows > 0) q_from_ = device->q;
  } else {
    q_ = buffer_.bytes_as(a.q, DType::F32, {any_q_ ? n_draft_rows : 0, V_});
  }
  device_tokens_ = device_inputs_ = Tensor{};
  if (tokens_on_device_) {
    device_tokens_ = device->tokens.view({device->tokens.numel(), 1});
    // The target pass reads a missing child's token as padding (0), the walk as none (-1).
    device_inputs_ =
        device->inputs.data ? device->inputs.view({device->inputs.numel(), 1}) : device_tokens_;
  }
  staged_ = true;
  downloaded_ = false;
}

const float* BackendVerifier::embedding_on_backend(
    const std::shared_ptr<const std::vector<float>>& embedding, int dim) {
  if (be_.host_memory()) return embedding->data();
  for (const auto& [e, on_backend] : embeddings_)
    if (e == embedding) return on_backend.ptr<float>();
  const int64_t rows = static_cast<int64_t>(embedding->size()) / dim;
  embeddings_.emplace_back(embedding, be_.upload(embedding->data(), DType::F32, {rows, dim}));
  return embeddings_.back().second.ptr<float>();
}

Tensor BackendVerifier::moves(bool to, bool inputs) const {
  const Layout& a = at_;
  const int64_t first = (to ? a.node_moves + a.input_moves : 0) + (inputs ? a.node_moves : 0);
  return buffer_.bytes_as(a.moves + static_cast<size_t>(first) * sizeof(int32_t), DType::I32,
                          {inputs ? a.input_moves : a.node_moves});
}

void BackendVerifier::write_drafts(Backend& be, const VerifyLaunch& launch, Tensor& input_tokens) {
  if (!launch.drafts.data) return;
  Tensor inputs = input_tokens.view({input_tokens.numel(), 1});
  be.copy_rows(launch.drafts, launch.inputs_from, inputs, launch.inputs_to);
}

void BackendVerifier::gather_drafts(Backend& be, const VerifyLaunch& l) {
  if (l.q_from.data) {
    Tensor q = l.q;
    be.get_rows(l.q_from, l.q_index, q);
  }
  if (l.tokens.data) {
    Tensor words = l.words;
    be.copy_rows(l.tokens, l.nodes_from, words, l.nodes_to);
  }
}

void VerifyLaunch::add_to(GraphKey& key) const {
  key.add(m).add(rows).add(greedy).add(guided);
  for (const Tensor* t :
       {&probs, &scratch, &flag, &params, &nodes, &images, &verdicts, &carried, &q, &q_from,
        &q_index, &tokens, &words, &nodes_from, &nodes_to, &drafts, &inputs_from, &inputs_to})
    key.add(*t);
}

void BackendVerifier::burst_fields(std::vector<RoundField>& out) const {
  check(staged_ && m_ > 0, "internal: a burst's fields of no staged round");
  auto* base = static_cast<uint8_t*>(buffer_.data);
  for (int j = 0; j < m_; ++j) {
    for (int r = 0; r < rows_; ++r) {
      uint8_t* p = base + at_.params +
                   (static_cast<size_t>(j) * rows_ + r) * sizeof(DeviceSampleParams) +
                   offsetof(DeviceSampleParams, token_index);
      out.push_back(RoundField{reinterpret_cast<int32_t*>(p), j, RoundField::kCommitted, 0, 0});
    }
    uint8_t* im = base + at_.images + static_cast<size_t>(j) * sizeof(RoundImage);
    out.push_back(RoundField{reinterpret_cast<int32_t*>(im + offsetof(RoundImage, base_token)), j,
                             RoundField::kCommitted, 0, 0});
    // The round's low word (little-endian): a burst is far from 2^31 rounds.
    out.push_back(RoundField{reinterpret_cast<int32_t*>(im + offsetof(RoundImage, round)), j,
                             RoundField::kConstant, 1, 0});
  }
}

bool BackendVerifier::gathers_own_rows() const {
  // The same memory (the rows a round writes are where the next gathers from), covering this
  // round's rows: a batch that lost images gathers from the larger view of the same rows.
  return staged_ && q_from_.data && q_from_.data == probs_round_.data &&
         q_from_.dim(0) >= probs_round_.dim(0) && q_from_.dim(-1) == probs_round_.dim(-1);
}

void BackendVerifier::window_fields(std::vector<RoundField>& out) const {
  check(gathers_own_rows(), "internal: a window's fields of a round that does not gather its rows");
  auto* base = static_cast<uint8_t*>(buffer_.data);
  const int width = rows_ - 1;
  for (int j = 0; j < m_; ++j)
    for (int c = 0; c < draft_counts_[j]; ++c) {
      const size_t slot = static_cast<size_t>(j) * width + c;
      const int32_t word = static_cast<int32_t>(slot) * kWindowWords;
      uint8_t* node = base + at_.nodes + slot * sizeof(WalkNode);
      out.push_back({reinterpret_cast<int32_t*>(node + offsetof(WalkNode, token)), j,
                     RoundField::kWindow, word + kWindowToken, 0});
      out.push_back({reinterpret_cast<int32_t*>(node + offsetof(WalkNode, flags)), j,
                     RoundField::kWindow, word + kWindowFlags, 0});
      out.push_back({reinterpret_cast<int32_t*>(base + at_.q_rows + slot * sizeof(int32_t)), j,
                     RoundField::kWindow, word + kWindowRow, 0});
    }
}

std::span<const int32_t> BackendVerifier::carried(int j) const {
  check(j >= 0 && j < m_ && !staged_, "internal: BackendVerifier::carried out of turn");
  if (!any_carry_) return {};
  const auto* all = reinterpret_cast<const int32_t*>(host_.data() + at_.carried);
  return {all + static_cast<size_t>(j) * (rows_ - 1), static_cast<size_t>(rows_ - 1)};
}

void BackendVerifier::complete(int j, DraftTree& tree) const {
  check(j >= 0 && j < m_ && !staged_, "internal: BackendVerifier::complete out of turn");
  if (!tokens_on_device_) return;
  const auto* nodes = reinterpret_cast<const WalkNode*>(host_.data() + at_.nodes);
  // A child drawn without a token left (-1), and every node below one, is missing: the host
  // loop's tree has none of them (parents come first).
  for (size_t d = 0; d < tree.size(); ++d) {
    DraftNode& node = tree[d];
    if (node.token == kTokenOnDevice)
      node.token = nodes[static_cast<size_t>(j) * (rows_ - 1) + d].token;
    if (node.token < 0 || (node.parent >= 0 && tree[node.parent].token == kTokenMissing))
      node.token = kTokenMissing;
  }
}

const int32_t* BackendVerifier::table_on_backend(
    const std::shared_ptr<const LatentNeighbours>& table) {
  if (be_.host_memory()) return table->table().data();
  for (const auto& [t, on_backend] : tables_)
    if (t == table) return on_backend.ptr<int32_t>();
  const std::span<const int32_t> rows = table->table();
  tables_.emplace_back(table, be_.upload(rows.data(), DType::I32,
                                         {static_cast<int64_t>(table->vocab()), table->k_max()}));
  return tables_.back().second.ptr<int32_t>();
}

VerifyLaunch BackendVerifier::launch(bool guided) const {
  check(staged_, "internal: BackendVerifier::launch before stage");
  const Layout& a = at_;
  const int m = m_, rows = rows_, width = rows - 1;
  const int64_t n_rows = static_cast<int64_t>(m) * rows;
  VerifyLaunch l;
  l.m = m;
  l.rows = rows;
  l.greedy = greedy_;
  l.guided = guided;
  if (m == 0) return l;
  l.probs = probs_round_;
  l.scratch = scratch_.rows(0, m);
  l.flag = buffer_.bytes_as(a.flag, DType::I32, {1});
  l.params = buffer_.bytes_as(a.params, DType::U8,
                              {n_rows * static_cast<int64_t>(sizeof(DeviceSampleParams))});
  l.nodes =
      buffer_.bytes_as(a.nodes, DType::U8,
                       {static_cast<int64_t>(m) * width * static_cast<int64_t>(sizeof(WalkNode))});
  l.images = buffer_.bytes_as(a.images, DType::U8, {m * static_cast<int64_t>(sizeof(RoundImage))});
  l.verdicts =
      buffer_.bytes_as(a.verdicts, DType::U8, {m * static_cast<int64_t>(sizeof(DraftVerdict))});
  if (any_carry_)
    l.carried = buffer_.bytes_as(a.carried, DType::I32, {static_cast<int64_t>(m) * width});
  if (any_q_) l.q = q_;
  if (q_from_.data) {
    l.q_from = q_from_;
    l.q_index = buffer_.bytes_as(a.q_rows, DType::I32, {static_cast<int64_t>(m) * width});
  }
  if (tokens_on_device_) {
    l.tokens = device_tokens_;
    l.words = buffer_.bytes_as(0, DType::I32, {static_cast<int64_t>(a.back / sizeof(int32_t)), 1});
    l.nodes_from = moves(false, false);
    l.nodes_to = moves(true, false);
  }
  if (tokens_on_device_ && a.input_moves > 0) {
    l.drafts = device_inputs_;
    l.inputs_from = moves(false, true);
    l.inputs_to = moves(true, true);
  }
  return l;
}

void BackendVerifier::verify_on_device(Backend& be, const VerifyLaunch& l, const Tensor& logits) {
  if (l.m == 0) return;
  const int64_t n_rows = static_cast<int64_t>(l.m) * l.rows;
  const int V = static_cast<int>(l.probs.dim(-1));
  check(logits.dtype == DType::F32 && logits.dim(-1) == V &&
            logits.numel() >= (l.guided ? 2 : 1) * n_rows * V,
        "internal: BackendVerifier logits shape");
  Tensor probs = l.probs, flag = l.flag, scratch = l.scratch, verdicts = l.verdicts,
         carried = l.carried;
  const Tensor cond = logits.rows(0, n_rows);
  const Tensor uncond = l.guided ? logits.rows(n_rows, n_rows) : Tensor{};
  distribution_rows(be, cond, l.guided ? &uncond : nullptr, static_cast<int>(n_rows), l.params,
                    probs, flag);
  verify_images(be, probs, l.q.data ? &l.q : nullptr, l.nodes, l.images, l.m, l.rows - 1, l.greedy,
                scratch, verdicts, carried.data ? &carried : nullptr);
}

const std::vector<DraftVerdict>& BackendVerifier::verify(const Tensor& logits, bool guided) {
  const VerifyLaunch l = launch(guided);
  gather_drafts(be_, l);
  verify_on_device(be_, l, logits);
  return read();
}

const std::vector<DraftVerdict>& BackendVerifier::read() {
  check(staged_, "internal: BackendVerifier::read before stage");
  staged_ = false;
  const int m = m_;
  verdicts_.resize(m);
  if (m == 0) return verdicts_;
  const Layout& a = at_;
  const Tensor back = buffer_.bytes_as(0, DType::U8, {static_cast<int64_t>(a.back)});
  be_.download(back, host_.data());  // the round's one copy back
  int32_t failed = 0;
  std::memcpy(&failed, host_.data() + a.flag, sizeof failed);
  if (failed) throw Error(device_sample_failed());
  std::memcpy(verdicts_.data(), host_.data() + a.verdicts, m * sizeof(DraftVerdict));
  return verdicts_;
}

std::span<const float> BackendVerifier::row(int j, int r) {
  check(j >= 0 && j < m_ && r >= 0 && r < rows_, "internal: BackendVerifier::row out of range");
  const size_t V = static_cast<size_t>(V_);
  if (!downloaded_) {
    probs_host_.resize(static_cast<size_t>(probs_round_.numel()));
    be_.download(probs_round_, probs_host_.data());
    downloaded_ = true;
  }
  return {probs_host_.data() + (static_cast<size_t>(j) * rows_ + r) * V, V};
}

VerifyOutcome BackendVerifier::outcome(const DraftVerdict& v, const DraftTree& tree,
                                       ImageStats& stats) {
  VerifyOutcome out;
  out.next_token = v.next_token;
  out.rejected = v.rejected != 0;
  check(v.accepted >= 0 && v.last >= -1 && v.last < static_cast<int>(tree.size()) &&
            (v.last < 0 ? v.accepted == 0 : tree[v.last].depth == v.accepted),
        "internal: a device verdict outside its draft");
  for (int c = v.last; c >= 0; c = tree[c].parent) out.accepted.push_back(c);
  std::reverse(out.accepted.begin(), out.accepted.end());
  // As verify_draft counts: at each depth the children of the path's node are tested in order up
  // to the accepted one; at the depth that ended the round, all of them (each was rejected).
  auto count = [&](int depth, int64_t n, std::vector<int64_t>& v) {
    if (n == 0) return;
    if (static_cast<int>(v.size()) < depth) v.resize(depth, 0);
    v[depth - 1] += n;
  };
  int parent = -1;
  for (int d = 0; d <= static_cast<int>(out.accepted.size()); ++d) {
    const int until = d < static_cast<int>(out.accepted.size()) ? out.accepted[d] : -1;
    int64_t tested = 0;
    for (int c = 0; c < static_cast<int>(tree.size()); ++c) {
      if (tree[c].parent != parent) continue;
      if (tree[c].token == kTokenMissing) break;  // it and its later siblings were not drafted
      ++tested;
      if (c == until) break;
    }
    count(d + 1, tested, stats.proposed);
    if (until >= 0) {
      count(d + 1, 1, stats.accepted);
      parent = until;
    }
  }
  return out;
}

}  // namespace tessera::speculative
