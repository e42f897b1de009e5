#include "speculative/continuous/cspd_loop.h"

#include <algorithm>
#include <cmath>

#include "common/clock.h"
#include "speculative/continuous/cspd_acceptance.h"
#include "tessera/error.h"

namespace tessera {

namespace {

// Random purposes of the verification streams (MarNoise::uniform / normal).
constexpr uint32_t kPurposeDecision = 1;

// What the draft recorded for one pending window token.
struct DraftRecord {
  std::vector<float> mean, std, x;  // test-step Gaussian (std with temperature) and drafted value
  std::vector<double> sum_log_std;  // Paper / Reference: over the noisy steps j >= 1
};

std::vector<float> stds(const std::vector<float>& log_var, size_t offset, int d,
                        float temperature) {
  std::vector<float> s(d);
  for (int i = 0; i < d; ++i) s[i] = std::exp(0.5f * log_var[offset + i]) * temperature;
  return s;
}

}  // namespace

int cspd_exact_test_step(const CspdSettings& spec, int steps) {
  const int t = spec.test_step < 0 ? steps / 2 : spec.test_step;
  check_param(t >= 1 && t < steps, "cspd.test_step",
              "must be in [1, " + std::to_string(steps - 1) +
                  "] (the respaced diffusion steps with noise), got " + std::to_string(t));
  return t;
}

std::vector<std::vector<float>> cspd_generate(
    const Mar& target, const Mar& draft, const GaussianDiffusion& diffusion, Backend& backend,
    const std::vector<int>& labels, const MarSamplingOptions& sampling, const CspdSettings& spec,
    const MarNoise& noise, const std::function<void(int64_t)>& on_tokens, MarStats& stats) {
  const cspd::Variant variant = spec.variant;
  const bool exact = variant == cspd::Variant::Exact;
  check(spec.draft_len >= 1,
        "cspd_generate: draft_len must be at least 1");  // windows divide by it
  const int S = diffusion.steps();
  const int t_star = exact ? cspd_exact_test_step(spec, S) : 0;
  // Paper / Reference test the last step (j = 0); Exact the transition at t*.
  const int test_step = exact ? t_star : 0;

  MarCanvas cv = new_canvas(target.config(), labels, noise);
  const int L = cv.seq_len, d = cv.token_dim, B = cv.images;
  const std::vector<int> lens = mask_lengths(L, sampling.num_iter);
  const double milestone = sampling.num_iter * static_cast<double>(spec.prefill);
  std::vector<uint8_t> verified_unknown = cv.unknown;  // the target's canvas: verified tokens only
  std::vector<std::vector<int32_t>> window(B);
  std::vector<std::vector<DraftRecord>> records(B, std::vector<DraftRecord>(L));
  std::vector<uint8_t> origin(static_cast<size_t>(B) * L, 0);

  for (int s = 0; s < sampling.num_iter; ++s) {
    const bool last = s == sampling.num_iter - 1;
    const auto predict = cv.step_positions(lens[s], last);
    const float cfg = cfg_at_step(sampling, L, lens[s]);
    if (s <= milestone) {  // pre-filling by the target (Continuous SD §3.2)
      const int64_t done =
          mar_target_step(target, diffusion, backend, cv, predict, cfg, sampling.temperature, noise,
                          stats, sampling.device_loop);
      verified_unknown = cv.unknown;
      if (on_tokens) on_tokens(done);
      continue;
    }

    // Draft step: the draft's own class embedding and guidance, the positions' shared noise.
    double t0 = now_s();
    MarStepResult r = mar_step(draft, diffusion, backend, cv, predict, cfg, sampling.temperature,
                               noise, test_step + 1, sampling.device_loop);
    DiffusionChains& dc = *r.chains;
    stats.device_steps += dc.on_device() ? 1 : 0;
    dc.gaussian(test_step);
    const std::vector<float> test_mean = dc.mean(), test_log_var = dc.log_var();
    const std::vector<double> draft_sum_log_std = dc.sum_log_std();
    dc.advance(test_step,
               [&](int row, std::span<float> out) { r.step_noise(noise, row, test_step, out); });
    const std::vector<float> test_x = dc.x();  // the draft's value after the tested step
    if (exact)
      dc.run(test_step - 1, 0,
             [&](int row, int j, std::span<float> out) { r.step_noise(noise, row, j, out); });
    for (size_t row = 0; row < r.rows.size(); ++row) {
      const auto [b, p] = r.rows[row];
      DraftRecord& rec = records[b][p];
      const size_t off = row * d;
      rec.mean.assign(test_mean.begin() + off, test_mean.begin() + off + d);
      rec.std = stds(test_log_var, off, d, sampling.temperature);
      rec.x.assign(test_x.begin() + off, test_x.begin() + off + d);
      rec.sum_log_std.assign(draft_sum_log_std.begin() + off, draft_sum_log_std.begin() + off + d);
      cv.write(b, p, dc.x().data() + off);  // the draft token (Paper/Reference: x == mu_0^q)
      window[b].push_back(p);
    }
    stats.draft_forwards += 1;
    stats.head_rows_draft += dc.net_rows();
    stats.draft_seconds += (now_s() - t0);

    if (!((s % spec.draft_len == 0 && s != 0) || last)) {
      if (on_tokens) on_tokens(0);
      continue;
    }
    // Verification: one target pass with every window token masked (the verified canvas).
    MarCanvas visible = cv;
    visible.unknown = verified_unknown;
    for (auto& w : window) std::sort(w.begin(), w.end());
    MarStepResult t = mar_step(target, diffusion, backend, visible, window, cfg,
                               sampling.temperature, noise, test_step + 1, sampling.device_loop);
    DiffusionChains& tc = *t.chains;
    stats.device_steps += tc.on_device() ? 1 : 0;
    t0 = now_s();
    tc.gaussian(test_step);
    stats.target_head_seconds += (now_s() - t0);
    t0 = now_s();
    const auto& rows = t.rows;
    std::vector<std::vector<float>> decided(rows.size());
    for (size_t row = 0; row < rows.size(); ++row) {
      const auto [b, p] = rows[row];
      const DraftRecord& q = records[b][p];
      const size_t off = row * d;
      const std::vector<float> p_mean(tc.mean().begin() + off, tc.mean().begin() + off + d);
      const std::vector<float> p_std = stds(tc.log_var(), off, d, sampling.temperature);
      const std::vector<double> p_sls(tc.sum_log_std().begin() + off,
                                      tc.sum_log_std().begin() + off + d);
      const cspd::ChainRecord pr{{p_mean, p_std}, p_sls};
      const cspd::ChainRecord qr{{q.mean, q.std}, q.sum_log_std};
      uint32_t ku = 0, kn = 0;
      cspd::TokenRandom rng{[&] { return noise.uniform(b, p, kPurposeDecision, ku++); },
                            [&] { return noise.normal(b, p, kPurposeDecision, kn++); }};
      const cspd::Decision dec =
          cspd::decide(variant, q.x, pr, qr, spec.inner_temperature, spec.max_resample_tries, rng);
      if (spec.on_decision)
        spec.on_decision({b, p, pr.last, qr.last, q.x, dec.token, dec.accepted, dec.fallback,
                          dec.resample_tries});
      decided[row] = dec.token;
      stats.drafted += 1;
      stats.accepted += dec.accepted ? 1 : 0;
      stats.resample_tries += dec.resample_tries;
      stats.fallbacks += dec.fallback ? 1 : 0;
      origin[static_cast<size_t>(b) * L + p] = dec.accepted ? 1 : 2;
    }
    stats.verify_seconds += (now_s() - t0);
    if (exact) {
      // The decided value is the target's state after step t*; the target finishes the chain.
      t0 = now_s();
      for (size_t row = 0; row < rows.size(); ++row)
        std::copy(decided[row].begin(), decided[row].end(), tc.x().begin() + row * d);
      tc.run(test_step - 1, 0,
             [&](int row, int j, std::span<float> out) { t.step_noise(noise, row, j, out); });
      for (size_t row = 0; row < rows.size(); ++row)
        decided[row].assign(tc.x().begin() + row * d, tc.x().begin() + (row + 1) * d);
      stats.target_head_seconds += (now_s() - t0);
    }
    for (size_t row = 0; row < rows.size(); ++row)
      cv.write(rows[row].first, rows[row].second, decided[row].data());
    stats.target_forwards += 1;
    stats.head_rows_target += tc.net_rows();
    stats.target_transformer_seconds += t.transformer_seconds;
    stats.target_head_seconds += t.head_seconds;
    verified_unknown = cv.unknown;
    for (auto& w : window) w.clear();
    if (on_tokens) on_tokens(static_cast<int64_t>(rows.size()));
  }
  std::vector<std::vector<float>> out(B);
  for (int b = 0; b < B; ++b) {
    out[b].assign(cv.tokens.begin() + static_cast<size_t>(b) * L * d,
                  cv.tokens.begin() + static_cast<size_t>(b + 1) * L * d);
    stats.token_origin.emplace_back(origin.begin() + static_cast<size_t>(b) * L,
                                    origin.begin() + static_cast<size_t>(b + 1) * L);
  }
  stats.images += B;
  stats.tokens += static_cast<int64_t>(B) * L;
  return out;
}

}  // namespace tessera
