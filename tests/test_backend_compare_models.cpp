// The models on a backend under test against the same models on the CPU backend: LlamaGen logits
// (the fixtures' f32 and bf16 c2i models, the shipped emoji target), greedy token streams, the VQ
// decoder's pixels, MAR's MAE forward, diffusion-head net and KL-16 decoder. Tolerances are the
// issue's targets (issue 40): logits within 1e-4 (f32) and 1e-2 (bf16) of the largest logit,
// pixels within 2/255, MAR latents within 1e-3; the cpu2 self-check must match bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backends_under_test.h"
#include "decode/mar_sampler.h"
#include "decode/session.h"
#include "io/npy.h"
#include "models/diffusion_head.h"
#include "models/kl_vae_decoder.h"
#include "models/llamagen.h"
#include "models/mar.h"
#include "models/t5_encoder.h"
#include "models/vq_decoder.h"
#include "tessera/config.h"
#include "tessera/tessera.h"

using namespace tessera;
using namespace tessera::testing_backends;

namespace {

using Vec = std::vector<float>;

const std::string kFixtures = TESSERA_FIXTURES;
const std::string kEmojiTarget = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/target";

constexpr Tol kLogitsF32{1e-4, 1e-6, true};
constexpr Tol kLogitsBf16{1e-2, 1e-6, true};
constexpr Tol kPixels{0.0, 2.0 / 255.0};  // on [0, 1] pixel values (see to_unit)
constexpr Tol kMarLatents{0.0, 1e-3};

Vec down(Backend& b, const Tensor& t) {
  Vec v(static_cast<size_t>(t.numel()));
  b.download(t, v.data());
  return v;
}

// A decoder output (nominal [-1, 1]) as the [0, 1] values its pixels quantise.
Vec to_unit(Vec v) {
  for (float& x : v) x = std::clamp((x + 1.0f) * 0.5f, 0.0f, 1.0f);
  return v;
}

struct GptCase {
  const char* name;
  std::string dir;
  bool bf16;
  bool t2i =
      false;  // conditioned on the fixtures' caption (padding: key_visible) instead of a class
};

const std::vector<GptCase>& gpt_cases() {
  static const std::vector<GptCase> cases = {
      {"c2i_f32", kFixtures + "/llamagen/c2i_f32", false},
      {"c2i_bf16", kFixtures + "/llamagen/c2i_bf16", true},
      {"t2i_f32", kFixtures + "/llamagen/t2i_f32", false, true},
      {"t2i_bf16", kFixtures + "/llamagen/t2i_bf16", true, true},
      {"emoji target", kEmojiTarget, false},
  };
  return cases;
}

// The case's condition: class `label`, or the caption for a t2i model.
Condition condition(const GptCase& gc, const ModelConfig& mc, int label) {
  return gc.t2i ? Condition::caption_file(kFixtures + "/llamagen/golden/caption.npy", mc.gpt)
                : Condition::label(label % mc.gpt.num_classes);
}

// Condition `c`'s prefix, then `tokens` appended in chunks of 1, 3 and the rest (decode and
// verification windows): the logits of every appended token.
Vec llamagen_logits(Backend& b, const ModelConfig& mc, const Condition& c,
                    std::span<const int32_t> tokens) {
  LlamaGen model(mc, b);
  SessionOptions o;
  o.max_new = static_cast<int>(tokens.size());
  o.max_outputs_per_seq = o.max_new;
  Session s(model, o);
  const int32_t slot = s.acquire_slot();
  const Condition* cp = &c;
  Vec all, part;
  s.read(s.prefill(std::span(&cp, 1), false, std::span(&slot, 1)).logits, part);
  all = part;
  const int n = static_cast<int>(tokens.size());
  for (int first = 0; first < n;) {
    const int len = first == 0 ? 1 : first == 1 ? 3 : n - first;
    StepBatch sb;
    sb.n_new = len;
    sb.slots = {slot};
    for (int j = 0; j < len; ++j) {
      sb.tokens.push_back(tokens[first + j]);
      sb.positions.push_back(model.token_position(first + j));
      sb.output_at.push_back(j);
    }
    s.read(s.forward(sb).logits, part);
    all.insert(all.end(), part.begin(), part.end());
    first += len;
  }
  return all;
}

// `steps` greedy tokens after condition `c`'s prefix, one forward per token.
std::vector<int32_t> greedy_tokens(Backend& b, const ModelConfig& mc, const Condition& c,
                                   int steps) {
  LlamaGen model(mc, b);
  Session s(model, SessionOptions{});
  const int32_t slot = s.acquire_slot();
  const Condition* cp = &c;
  Vec logits;
  s.read(s.prefill(std::span(&cp, 1), false, std::span(&slot, 1)).logits, logits);
  std::vector<int32_t> out;
  for (int t = 0; t < steps; ++t) {
    const int32_t tok =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(tok);
    StepBatch sb;
    sb.n_new = 1;
    sb.slots = {slot};
    sb.tokens = {tok};
    sb.positions = {model.token_position(t)};
    sb.output_at = {0};
    s.read(s.forward(sb).logits, logits);
  }
  return out;
}

class Models : public BackendTest {};

TEST_P(Models, LlamaGenLogits) {
  for (const GptCase& gc : gpt_cases()) {
    SCOPED_TRACE(gc.name);
    const ModelConfig mc = load_model_config(gc.dir);
    std::vector<int32_t> tokens(11);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>((i * 7919 + 13) % mc.gpt.vocab_size);
    const Condition c = condition(gc, mc, 3);
    const Vec want = llamagen_logits(ref(), mc, c, tokens);
    const Vec got = llamagen_logits(backend(), mc, c, tokens);
    EXPECT_TRUE(
        same(std::string("logits ") + gc.name, got, want, gc.bf16 ? kLogitsBf16 : kLogitsF32));
  }
}

TEST_P(Models, GreedyTokenStreamsEqual) {
  for (const GptCase& gc : gpt_cases()) {
    SCOPED_TRACE(gc.name);
    const ModelConfig mc = load_model_config(gc.dir);
    const int steps = std::min(24, mc.gpt.n_image_tokens());
    for (int label : {0, 1}) {
      const Condition c = condition(gc, mc, label);
      EXPECT_EQ(greedy_tokens(backend(), mc, c, steps), greedy_tokens(ref(), mc, c, steps))
          << "label " << label;
    }
  }
}

TEST_P(Models, VqDecoderPixels) {
  for (const GptCase& gc : gpt_cases()) {
    SCOPED_TRACE(gc.name);
    const ModelConfig mc = load_model_config(gc.dir);
    const int grid = mc.gpt.grid, n = 2;
    std::vector<int32_t> tokens(static_cast<size_t>(n) * grid * grid);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>((i * 104729 + 5) % mc.vq.codebook_size);
    auto run = [&](Backend& b) {
      VqDecoder vq(mc, b);
      return to_unit(down(b, vq.decode(tokens, n, grid)));
    };
    const Vec want = run(ref());
    EXPECT_TRUE(same(std::string("vq pixels ") + gc.name, run(backend()), want, kPixels));
  }
}

std::vector<float> npy_f32(const std::string& name) {
  return read_npy(kFixtures + "/mar/golden/" + name).as_f32();
}

TEST_P(Models, MarMaeForward) {
  for (const char* name : {"target_f32", "target_f16"}) {
    SCOPED_TRACE(name);
    const ModelConfig mc = load_model_config(kFixtures + "/mar/" + name);
    const Vec tokens = npy_f32("mae_tokens.npy"), maskf = npy_f32("mae_mask.npy");
    const std::vector<int32_t> labels = read_npy(kFixtures + "/mar/golden/mae_labels.npy").as_i32();
    std::vector<uint8_t> unknown(maskf.size());
    for (size_t i = 0; i < maskf.size(); ++i) unknown[i] = maskf[i] != 0.0f;
    std::vector<std::vector<int32_t>> all(labels.size());
    for (auto& v : all)
      for (int i = 0; i < mc.mar.seq_len(); ++i) v.push_back(i);
    auto run = [&](Backend& b) {
      Mar mar(mc, b);
      return down(b, mar.forward(tokens, unknown, labels, all));
    };
    const Vec want = run(ref());
    EXPECT_TRUE(same(std::string("mae z ") + name, run(backend()), want, kMarLatents));
  }
}

TEST_P(Models, MarDiffusionHeadNet) {
  const ModelConfig mc = load_model_config(kFixtures + "/mar/target_f32");
  const Vec zc = npy_f32("diff_z.npy"), xT = npy_f32("diff_xT.npy");
  const int N = 3, d = mc.mar.token_dim(), D = mc.mar.dim;
  auto run = [&](Backend& b) {
    Mar mar(mc, b);
    const DiffusionHead& head = mar.head();
    const Tensor cond = head.embed_condition(b.upload(zc.data(), DType::F32, {N, D}));
    const Tensor x = b.upload(xT.data(), DType::F32, {N, d});
    Vec out;
    for (int t : {999, 321, 0}) {
      const Vec o = down(b, head.forward(x, t, cond));
      out.insert(out.end(), o.begin(), o.end());
    }
    return out;
  };
  const Vec want = run(ref());
  EXPECT_TRUE(same("diffusion head net", run(backend()), want, kMarLatents));
}

// The T5 encoder (issue 45) on the fixture's token ids, f32 and bf16 weights, one sequence with
// padding hidden and a batch of two: hidden states within the f32 logits' tolerance.
TEST_P(Models, T5EncoderHiddenStates) {
  const std::vector<int32_t> ids = read_npy(kFixtures + "/t5/golden/ids_padded.npy").as_i32();
  const std::vector<int32_t> mask32 = read_npy(kFixtures + "/t5/golden/mask_padded.npy").as_i32();
  const std::vector<uint8_t> mask(mask32.begin(), mask32.end());
  for (const char* dir : {"f32", "bf16"}) {
    SCOPED_TRACE(dir);
    const ModelConfig mc = load_model_config(kFixtures + "/t5/" + dir);
    auto run = [&](Backend& b) {
      T5Encoder enc(mc, b);
      Vec out = enc.encode(std::span(ids).first(120), std::span(mask).first(120), 1);
      const Vec two = enc.encode(std::span(ids).first(240), std::span(mask).first(240), 2);
      out.insert(out.end(), two.begin(), two.end());
      return out;
    };
    const Vec want = run(ref());
    EXPECT_TRUE(same(std::string("t5 hidden states ") + dir, run(backend()), want, kLogitsF32));
  }
}

// MAR's device loop (issue 42, item 4): whole generations whose diffusion chains step where the
// head's outputs are (DiffusionChains::use_device, sampling/diffusion_rows.h; on a GPU the
// diffusion step kernel), unguided and guided, against the CPU's host chains: latents within the
// MAR tolerance (the device's exp, log, sin and cos are within an ulp of the host's).
TEST_P(Models, MarDeviceLoopLatents) {
  const ModelConfig mc = load_model_config(kFixtures + "/mar/target_f32");
  const GaussianDiffusion diffusion(mc.mar.num_train_timesteps, 50, mc.mar.noise_schedule);
  const PhiloxMarNoise noise(21, {7, 8});
  const std::vector<int> labels = {2, 9};
  for (const float cfg : {1.0f, 3.0f}) {
    SCOPED_TRACE("cfg " + std::to_string(cfg));
    MarSamplingOptions s;
    s.num_iter = 4;
    s.cfg_scale = cfg;
    s.temperature = 0.9f;
    auto run = [&](Backend& b, DeviceLoop where, MarStats& st) {
      Mar mar(mc, b);
      s.device_loop = where;
      Vec out;
      for (const std::vector<float>& im : mar_generate(mar, diffusion, b, labels, s, noise, {}, st))
        out.insert(out.end(), im.begin(), im.end());
      return out;
    };
    MarStats want_stats, got_stats;
    const Vec want = run(ref(), DeviceLoop::Off, want_stats);
    const Vec got = run(backend(), DeviceLoop::On, got_stats);
    EXPECT_EQ(got_stats.device_steps, s.num_iter);
    EXPECT_TRUE(same("mar device-loop latents", got, want, kMarLatents));
  }
}

TEST_P(Models, KlVaeDecoderPixels) {
  const ModelConfig mc = load_model_config(kFixtures + "/mar/target_f32");
  const Vec tokens = npy_f32("vae_tokens.npy");
  auto run = [&](Backend& b) {
    KlVaeDecoder vae(mc, b);
    return to_unit(down(b, vae.decode(tokens, 2)));
  };
  const Vec want = run(ref());
  EXPECT_TRUE(same("kl-16 pixels", run(backend()), want, kPixels));
}

INSTANTIATE_TEST_SUITE_P(Backends, Models, ::testing::ValuesIn(kBackendNames), backend_param_name);

}  // namespace
