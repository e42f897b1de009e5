// A CPU backend that counts what crosses to it (allocations, transfers, synchronisations, row
// moves) and, optionally, records captured graphs and replays them: the device-ready contracts of
// the decoding loops are checked with it on the CPU (tests/test_decoder.cpp,
// tests/test_device_rounds.cpp).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "tensor/backend.h"
#include "tensor/cpu/cpu_backend.h"

namespace tessera::test {

// The CPU backend, counting the calls that allocate or move data between host and device.
class CountingBackend : public Backend {
 public:
  int allocations = 0, uploads = 0, writes = 0, downloads = 0, syncs = 0, copies = 0, moves = 0;
  Backend& be = cpu_backend();

  std::string name() const override { return "counting cpu"; }
  int64_t available_memory() const override { return be.available_memory(); }
  Tensor empty(DType d, Shape s) override { return ++allocations, be.empty(d, std::move(s)); }
  Tensor zeros(DType d, Shape s) override { return ++allocations, be.zeros(d, std::move(s)); }
  Tensor upload(const void* h, DType d, Shape s) override {
    return ++uploads, be.upload(h, d, std::move(s));
  }
  // Downloads of F32 rows watch_width wide (a model's logits: watch_width its vocabulary).
  int64_t watch_width = 0;
  int watched_downloads = 0;
  void download(const Tensor& t, void* h) override { ++downloads, watch(t), be.download(t, h); }
  void upload_into(const void* h, Tensor& t) override { ++writes, be.upload_into(h, t); }
  void download_async(const Tensor& t, void* h) override {
    ++downloads, watch(t), be.download_async(t, h);
  }
  void watch(const Tensor& t) {
    if (watch_width > 0 && t.dtype == DType::F32 && t.dim(-1) == watch_width) ++watched_downloads;
  }
  void synchronize() override { ++syncs, be.synchronize(); }
  bool host_memory() const override { return be.host_memory(); }
  // With record_graphs, a capture keeps the ops and a replay runs them again, as a CUDA graph
  // replays its kernels: a step that read host values of its first burst would replay them. Not
  // a GPU's replay in full: the ops' host code runs again (a GPU runs only their kernels), and
  // the ops run one after another (a kernel's threads do not).
  bool record_graphs = false;
  int captures = 0, replays = 0;
  struct Recorded : OpGraph {
    std::function<void()> ops;
  };
  std::unique_ptr<OpGraph> capture(const std::function<void()>& ops) override {
    if (!record_graphs) return nullptr;
    ++captures;
    auto g = std::make_unique<Recorded>();
    g->ops = ops;
    return g;
  }
  void replay(OpGraph& g) override { ++replays, static_cast<Recorded&>(g).ops(); }
  void add_scalar_i32(Tensor& x, int32_t d) override { be.add_scalar_i32(x, d); }
  Tensor adopt_host(const void* h, DType d, Shape s, std::shared_ptr<void> o) override {
    return be.adopt_host(h, d, std::move(s), std::move(o));
  }
  Tensor to_f32(const Tensor& t) override { return ++allocations, be.to_f32(t); }
  void copy(const Tensor& a, Tensor& b) override { ++copies, be.copy(a, b); }
  void copy_rows(const Tensor& s, const Tensor& f, Tensor& t, const Tensor& d) override {
    ++moves, be.copy_rows(s, f, t, d);
  }
  void linear(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
    be.linear(x, w, b, y);
  }
  void get_rows(const Tensor& t, const Tensor& i, Tensor& o) override { be.get_rows(t, i, o); }
  void rms_norm(const Tensor& x, const Tensor& w, float e, Tensor& y) override {
    be.rms_norm(x, w, e, y);
  }
  void add(const Tensor& a, const Tensor& b, Tensor& y) override { be.add(a, b, y); }
  void swiglu(const Tensor& g, const Tensor& u, Tensor& y) override { be.swiglu(g, u, y); }
  void swiglu_stacked(const Tensor& gu, Tensor& y) override { be.swiglu_stacked(gu, y); }
  void geglu_stacked(const Tensor& gu, Tensor& y) override { be.geglu_stacked(gu, y); }
  void gelu_tanh(Tensor& x) override { be.gelu_tanh(x); }
  void silu(Tensor& x) override { be.silu(x); }
  void rope(Tensor& x, int n, int hd, const Tensor& cs, const Tensor& pos) override {
    be.rope(x, n, hd, cs, pos);
  }
  void kv_store(const Tensor& q, int h, int kv, int hd, const AttentionBatch& b, Tensor& k,
                Tensor& v) override {
    be.kv_store(q, h, kv, hd, b, k, v);
  }
  void expand_tree_mask(const Tensor& p, const Tensor& past, int n, int s, Tensor& m) override {
    be.expand_tree_mask(p, past, n, s, m);
  }
  void attention(const Tensor& q, int h, int kv, int hd, const AttentionBatch& b, const Tensor& k,
                 const Tensor& v, Tensor& o) override {
    be.attention(q, h, kv, hd, b, k, v, o);
  }
  void layer_norm(const Tensor& x, const Tensor* g, const Tensor* b, float e, Tensor& y) override {
    be.layer_norm(x, g, b, e, y);
  }
  void gelu_erf(Tensor& x) override { be.gelu_erf(x); }
  void self_attention(const Tensor& q, int b, int h, int hd, Tensor& o,
                      const SelfAttentionExtras& x) override {
    be.self_attention(q, b, h, hd, o, x);
  }
  void modulate(const Tensor& x, const Tensor& sh, const Tensor& sc, Tensor& y) override {
    be.modulate(x, sh, sc, y);
  }
  void add_gated(Tensor& h, const Tensor& g, const Tensor& u) override { be.add_gated(h, g, u); }
  void add_rows_broadcast(Tensor& x, const Tensor& t) override { be.add_rows_broadcast(x, t); }
  void conv2d(const Tensor& x, const Tensor& w, const Tensor& b, int p, Tensor& y) override {
    be.conv2d(x, w, b, p, y);
  }
  void group_norm(const Tensor& x, const Tensor& g, const Tensor& b, int n, float e, bool s,
                  Tensor& y) override {
    be.group_norm(x, g, b, n, e, s, y);
  }
  void upsample_nearest2x(const Tensor& x, Tensor& y) override { be.upsample_nearest2x(x, y); }
  void batched_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, float al,
                      Tensor& c) override {
    be.batched_matmul(a, ta, b, tb, al, c);
  }
  void softmax_rows(Tensor& x) override { be.softmax_rows(x); }
  void l2_normalize_rows(Tensor& x, float e) override { be.l2_normalize_rows(x, e); }
  void transpose_last2(const Tensor& x, Tensor& y) override { be.transpose_last2(x, y); }
  void relu(Tensor& x) override { be.relu(x); }
  void max_pool2x2(const Tensor& x, Tensor& y) override { be.max_pool2x2(x, y); }
  void avg_pool2x2(const Tensor& x, Tensor& y) override { be.avg_pool2x2(x, y); }
};

}  // namespace tessera::test
