#include "decode/mar_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/clock.h"
#include "sampling/rng.h"
#include "tessera/error.h"

namespace tessera {

namespace {

// Philox stream ids: sampling/diffusion_math.h (shared with the device step).
constexpr uint32_t kStreamStart = kMarStreamStart;
constexpr uint32_t kStreamStep = kMarStreamStep;
constexpr uint32_t kStreamOrder = kMarStreamOrder;
constexpr uint32_t kStreamUniform = kMarStreamUniform;
constexpr uint32_t kStreamNormal = kMarStreamNormal;

}  // namespace

std::vector<int32_t> PhiloxMarNoise::order(int image, int seq_len) const {
  std::vector<int32_t> o(seq_len);
  for (int i = 0; i < seq_len; ++i) o[i] = i;
  const CounterRng rng(seed_, images_.at(image));
  for (int i = seq_len - 1; i > 0; --i) {  // Fisher-Yates
    const int j = static_cast<int>(rng.uniform(static_cast<uint32_t>(i), kStreamOrder) * (i + 1));
    std::swap(o[i], o[std::min(j, i)]);
  }
  return o;
}

void PhiloxMarNoise::normals(int image, int position, uint32_t stream, std::span<float> out) const {
  for (size_t k = 0; k < out.size(); k += 2) {
    double z0 = 0.0, z1 = 0.0;
    mar_normal_pair(seed_, images_.at(image), static_cast<uint32_t>(position),
                    stream | static_cast<uint32_t>(k / 2), &z0, &z1);
    out[k] = static_cast<float>(z0);
    if (k + 1 < out.size()) out[k + 1] = static_cast<float>(z1);
  }
}

void PhiloxMarNoise::start(int image, int position, std::span<float> out) const {
  normals(image, position, kStreamStart, out);
}

void PhiloxMarNoise::step(int image, int position, int j, std::span<float> out) const {
  check(j >= 0 && j < 4096, "internal: diffusion step out of the noise stream range");
  normals(image, position, kStreamStep | (static_cast<uint32_t>(j) << 12), out);
}

double PhiloxMarNoise::uniform(int image, int position, uint32_t purpose, uint32_t k) const {
  // k has 20 bits of the stream word: a wrapped counter would repeat numbers silently.
  check(k <= 0xFFFFFu, "internal: MAR uniform stream exhausted (2^20 draws for one token)");
  const CounterRng rng(seed_, images_.at(image));
  return rng.uniform(static_cast<uint32_t>(position),
                     kStreamUniform | (purpose & 0xFF) << 20 | (k & 0xFFFFF));
}

double PhiloxMarNoise::normal(int image, int position, uint32_t purpose, uint32_t k) const {
  check(k / 2 <= 0xFFFFFu, "internal: MAR normal stream exhausted (2^21 draws for one token)");
  double z0 = 0.0, z1 = 0.0;
  mar_normal_pair(seed_, images_.at(image), static_cast<uint32_t>(position),
                  kStreamNormal | (purpose & 0xFF) << 20 | ((k / 2) & 0xFFFFF), &z0, &z1);
  return k % 2 ? z1 : z0;
}

std::vector<int> mask_lengths(int L, int num_iter) {
  check(num_iter >= 1, "MAR steps must be at least 1");
  check(num_iter <= L, "MAR steps (" + std::to_string(num_iter) + ") exceed the " +
                           std::to_string(L) + " tokens of an image");
  std::vector<int> out(num_iter);
  int masked = L;
  for (int s = 0; s < num_iter; ++s) {
    const double ratio = std::cos(M_PI / 2.0 * (s + 1) / num_iter);  // numpy float64
    const int len = static_cast<int>(std::floor(L * ratio));
    out[s] = std::max(1, std::min(masked - 1, len));
    masked = s == num_iter - 1 ? 0 : out[s];
  }
  return out;
}

float cfg_at_step(const MarSamplingOptions& s, int L, int mask_len_after) {
  if (s.cfg_schedule == "constant") return s.cfg_scale;
  // Linear (Muse): grows with the number of known tokens after the step.
  return 1.0f +
         (s.cfg_scale - 1.0f) * static_cast<float>(L - mask_len_after) / static_cast<float>(L);
}

DiffusionChains::DiffusionChains(const DiffusionHead& head, const GaussianDiffusion& diffusion,
                                 Backend& backend, const Tensor& z_cond, const Tensor* z_uncond,
                                 float cfg, float temperature)
    : head_(head),
      diffusion_(diffusion),
      backend_(backend),
      n_(static_cast<int>(z_cond.dim(0))),
      d_(head.token_dim()),
      guided_(z_uncond != nullptr),
      cfg_(cfg),
      temperature_(temperature) {
  if (guided_) {
    check(z_uncond->dim(0) == n_, "internal: guided chains need as many unconditional rows");
    cond_ = backend_.empty(DType::F32, {2 * n_, head.width()});
    Tensor c = cond_.rows(0, n_), u = cond_.rows(n_, n_);
    const Tensor ec = head.embed_condition(z_cond), eu = head.embed_condition(*z_uncond);
    backend_.copy(ec, c);
    backend_.copy(eu, u);
  } else {
    cond_ = head.embed_condition(z_cond);
  }
  const size_t nd = static_cast<size_t>(n_) * d_;
  x_.assign(nd, 0.0f);
  mean_.assign(nd, 0.0f);
  log_var_.assign(nd, 0.0f);
  sum_log_std_.assign(nd, 0.0);
}

void DiffusionChains::prepare_modulations(int from, int to) {
  // As many steps at once as fit a fixed budget: MAR-B with 8 rows (4 tokens, guided) holds all
  // 100 steps; a batch of 32 images about 20 at a time.
  constexpr int64_t kBudgetBytes = int64_t{128} << 20;
  const int64_t per_step =
      cond_.dim(0) * head_.width() * int64_t{4} * (3 * int64_t{head_.depth()} + 2);
  const int count = static_cast<int>(
      std::clamp<int64_t>(kBudgetBytes / std::max<int64_t>(per_step, 1), 1, from - to + 1));
  std::vector<int> ts(static_cast<size_t>(count));
  for (int s = 0; s < count; ++s) ts[static_cast<size_t>(s)] = diffusion_.timestep(from - s);
  mod_ = head_.modulations(cond_, ts);
  mod_hi_ = from;
  mod_lo_ = from - count + 1;
}

void DiffusionChains::gaussian(int j) {
  if (n_ == 0) return;
  if (!has_modulations(j)) prepare_modulations(j, j);
  const size_t nd = static_cast<size_t>(n_) * d_;
  const int rows = guided_ ? 2 * n_ : n_;
  // forward_with_cfg runs the conditional half's state for both halves.
  std::vector<float> in(static_cast<size_t>(rows) * d_);
  std::copy(x_.begin(), x_.end(), in.begin());
  if (guided_) std::copy(x_.begin(), x_.end(), in.begin() + nd);
  const Tensor xt = backend_.upload(in.data(), DType::F32, {rows, d_});
  const Tensor out = head_.forward(xt, mod_, mod_hi_ - j);
  net_rows_ += rows;
  std::vector<float> o(static_cast<size_t>(rows) * 2 * d_);
  backend_.download(out, o.data());
  std::vector<float> eps(nd), v(nd);
  for (int r = 0; r < n_; ++r)
    for (int i = 0; i < d_; ++i) {
      const float ec = o[(static_cast<size_t>(r) * 2) * d_ + i];
      if (guided_) {
        const float eu = o[(static_cast<size_t>(n_ + r) * 2) * d_ + i];
        eps[static_cast<size_t>(r) * d_ + i] = diffusion_guided_eps(ec, eu, cfg_);
      } else {
        eps[static_cast<size_t>(r) * d_ + i] = ec;
      }
      v[static_cast<size_t>(r) * d_ + i] = o[(static_cast<size_t>(r) * 2 + 1) * d_ + i];
    }
  diffusion_.mean_log_variance(j, x_, eps, v, mean_, log_var_);
}

void DiffusionChains::advance(int j, const std::function<void(int, std::span<float>)>& eps) {
  std::vector<float> e(d_);
  for (int r = 0; r < n_; ++r) {
    float* x = x_.data() + static_cast<size_t>(r) * d_;
    const float* m = mean_.data() + static_cast<size_t>(r) * d_;
    const float* lv = log_var_.data() + static_cast<size_t>(r) * d_;
    if (j == 0) {  // no noise at the last step: the token is the mean
      std::copy(m, m + d_, x);
      continue;
    }
    eps(r, e);
    for (int i = 0; i < d_; ++i) x[i] = diffusion_advance(m[i], lv[i], temperature_, e[i]);
  }
}

void DiffusionChains::use_device(uint64_t seed, std::vector<DiffusionRowNoise> rows) {
  check(static_cast<int>(rows.size()) == n_, "internal: a device chain without its noise row");
  device_ = true;
  seed_ = seed;
  noise_rows_ = std::move(rows);
}

void DiffusionChains::run_on_device(int from, int to) {
  const int halves = guided_ ? 2 : 1;
  const int64_t nd = static_cast<int64_t>(n_) * d_;
  const size_t nd_bytes = static_cast<size_t>(nd) * sizeof(float);
  // One buffer for what travels: the sums, x, mean and log var come back in one copy; the rows'
  // noise identities go up with the sums and x.
  const size_t x_at = static_cast<size_t>(nd) * sizeof(double), mean_at = x_at + nd_bytes,
               log_var_at = mean_at + nd_bytes, back = log_var_at + nd_bytes,
               rows_at = aligned_offset(back),
               total = rows_at + noise_rows_.size() * sizeof(DiffusionRowNoise);
  std::vector<uint8_t> host(total, 0);
  std::memcpy(host.data(), sum_log_std_.data(), x_at);
  std::memcpy(host.data() + x_at, x_.data(), nd_bytes);
  std::memcpy(host.data() + rows_at, noise_rows_.data(),
              noise_rows_.size() * sizeof(DiffusionRowNoise));
  Tensor state = backend_.upload(host.data(), DType::U8, {static_cast<int64_t>(total)});
  Tensor sums = state.bytes_as(0, DType::U8, {static_cast<int64_t>(x_at)});
  Tensor x = state.bytes_as(x_at, DType::F32, {n_, d_});
  Tensor mean = state.bytes_as(mean_at, DType::F32, {n_, d_});
  Tensor log_var = state.bytes_as(log_var_at, DType::F32, {n_, d_});
  const Tensor rows = state.bytes_as(
      rows_at, DType::U8, {static_cast<int64_t>(noise_rows_.size() * sizeof(DiffusionRowNoise))});
  // The head's input: [x; x] when guided (forward_with_cfg runs the conditional half's state for
  // both halves).
  Tensor x_in = backend_.empty(DType::F32, {halves * static_cast<int64_t>(n_), d_});
  for (int h = 0; h < halves; ++h) {
    Tensor half = x_in.rows(static_cast<int64_t>(h) * n_, n_);
    backend_.copy(x, half);
  }
  for (int j = from; j >= to; --j) {
    if (!has_modulations(j)) prepare_modulations(j, to);
    const Tensor out = head_.forward(x_in, mod_, mod_hi_ - j);
    net_rows_ += halves * n_;
    DiffusionStep step;
    step.coefficients = diffusion_.coefficients(j);
    step.j = j;
    step.guided = guided_ ? 1 : 0;
    step.cfg = cfg_;
    step.temperature = temperature_;
    step.seed = seed_;
    diffusion_step_rows(backend_, out, n_, d_, step, rows, x, mean, log_var, sums, x_in);
  }
  backend_.download(state.bytes_as(0, DType::U8, {static_cast<int64_t>(back)}), host.data());
  std::memcpy(sum_log_std_.data(), host.data(), x_at);
  std::memcpy(x_.data(), host.data() + x_at, nd_bytes);
  std::memcpy(mean_.data(), host.data() + mean_at, nd_bytes);
  std::memcpy(log_var_.data(), host.data() + log_var_at, nd_bytes);
}

void DiffusionChains::run(int from, int to,
                          const std::function<void(int, int, std::span<float>)>& eps) {
  if (device_ && n_ > 0 && from >= to) {
    run_on_device(from, to);
    return;
  }
  for (int j = from; j >= to; --j) {
    if (n_ > 0 && !has_modulations(j)) prepare_modulations(j, to);
    gaussian(j);
    if (j >= 1)
      for (size_t i = 0; i < sum_log_std_.size(); ++i) sum_log_std_[i] += 0.5 * log_var_[i];
    advance(j, [&](int row, std::span<float> out) { eps(row, j, out); });
  }
}

int MarCanvas::masked() const {
  int m = 0;
  for (int i = 0; i < seq_len; ++i) m += unknown[i];
  return m;
}

std::vector<std::vector<int32_t>> MarCanvas::step_positions(int mask_len_after, bool last) const {
  std::vector<std::vector<int32_t>> out(images);
  for (int b = 0; b < images; ++b) {
    const auto& o = orders[b];
    // The first mask_len entries of the order stay masked; the step predicts the masked rest.
    for (int i = last ? 0 : mask_len_after; i < seq_len; ++i)
      if (unknown[static_cast<size_t>(b) * seq_len + o[i]]) out[b].push_back(o[i]);
    std::sort(out[b].begin(), out[b].end());  // the reference's nonzero() order
  }
  return out;
}

void MarCanvas::write(int image, int position, const float* x) {
  // Every finished token passes here (target steps and accepted drafts): a NaN or Inf from the
  // model would decode to a silently broken image, so it stops the run instead.
  for (int i = 0; i < token_dim; ++i)
    if (!std::isfinite(x[i]))
      throw Error("the model produced a non-finite latent (NaN or Inf) at token position " +
                  std::to_string(position) + " of image " + std::to_string(image));
  const size_t at = static_cast<size_t>(image) * seq_len + position;
  std::copy(x, x + token_dim, tokens.begin() + at * token_dim);
  unknown[at] = 0;
}

MarCanvas new_canvas(const MarConfig& c, const std::vector<int>& labels, const MarNoise& noise) {
  MarCanvas cv;
  cv.images = static_cast<int>(labels.size());
  cv.seq_len = c.seq_len();
  cv.token_dim = c.token_dim();
  cv.labels = labels;
  for (int b = 0; b < cv.images; ++b) {
    cv.orders.push_back(noise.order(b, cv.seq_len));
    check(static_cast<int>(cv.orders.back().size()) == cv.seq_len, "internal: order length");
  }
  cv.tokens.assign(static_cast<size_t>(cv.images) * cv.seq_len * cv.token_dim, 0.0f);
  cv.unknown.assign(static_cast<size_t>(cv.images) * cv.seq_len, 1);
  return cv;
}

MarStepResult mar_step(const Mar& model, const GaussianDiffusion& diffusion, Backend& backend,
                       const MarCanvas& cv, const std::vector<std::vector<int32_t>>& predict,
                       float cfg, float temperature, const MarNoise& noise, int stop_step,
                       DeviceLoop where) {
  MarStepResult res;
  const bool guided = cfg != 1.0f;  // MAR doubles the batch only when cfg != 1
  const int B = cv.images;
  double t0 = now_s();
  Tensor z;
  if (guided) {
    // [conditional rows; unconditional rows (fake_latent)] on the same canvas.
    std::vector<float> tokens(cv.tokens);
    tokens.insert(tokens.end(), cv.tokens.begin(), cv.tokens.end());
    std::vector<uint8_t> unknown(cv.unknown);
    unknown.insert(unknown.end(), cv.unknown.begin(), cv.unknown.end());
    std::vector<int32_t> labels(cv.labels.begin(), cv.labels.end());
    labels.insert(labels.end(), B, -1);
    std::vector<std::vector<int32_t>> pred(predict);
    pred.insert(pred.end(), predict.begin(), predict.end());
    z = model.forward(tokens, unknown, labels, pred);
  } else {
    const std::vector<int32_t> labels(cv.labels.begin(), cv.labels.end());
    z = model.forward(cv.tokens, cv.unknown, labels, predict);
  }
  res.transformer_seconds = (now_s() - t0);
  t0 = now_s();
  const int64_t n = guided ? z.dim(0) / 2 : z.dim(0);
  const Tensor zc = z.rows(0, n);
  const Tensor zu = guided ? z.rows(n, n) : Tensor{};
  res.chains = std::make_unique<DiffusionChains>(model.head(), diffusion, backend, zc,
                                                 guided ? &zu : nullptr, cfg, temperature);
  // Row r of the chains is (image, position) in predict order.
  for (int b = 0; b < B; ++b)
    for (int32_t p : predict[b]) res.rows.push_back({b, p});
  const int d = res.chains->dim();
  for (size_t r = 0; r < res.rows.size(); ++r)
    noise.start(res.rows[r].first, res.rows[r].second,
                std::span<float>(res.chains->x().data() + r * d, static_cast<size_t>(d)));
  // The device loop draws the step noise where the chains are: MAR's Philox streams only (tests
  // that inject noise arrays step on the host).
  const auto* philox = dynamic_cast<const PhiloxMarNoise*>(&noise);
  if (philox &&
      (where == DeviceLoop::On || (where == DeviceLoop::Auto && !backend.host_memory()))) {
    std::vector<DiffusionRowNoise> rows(res.rows.size());
    for (size_t r = 0; r < res.rows.size(); ++r) {
      rows[r].image_index = philox->image_index(res.rows[r].first);
      rows[r].position = res.rows[r].second;
    }
    res.chains->use_device(philox->seed(), std::move(rows));
  }
  res.chains->run(diffusion.steps() - 1, stop_step, [&](int row, int j, std::span<float> out) {
    res.step_noise(noise, row, j, out);
  });
  res.head_seconds = (now_s() - t0);
  return res;
}

int64_t mar_target_step(const Mar& model, const GaussianDiffusion& diffusion, Backend& backend,
                        MarCanvas& cv, const std::vector<std::vector<int32_t>>& predict, float cfg,
                        float temperature, const MarNoise& noise, MarStats& stats,
                        DeviceLoop where) {
  const MarStepResult r =
      mar_step(model, diffusion, backend, cv, predict, cfg, temperature, noise, 0, where);
  stats.device_steps += r.chains->on_device() ? 1 : 0;
  const int d = cv.token_dim;
  for (size_t row = 0; row < r.rows.size(); ++row)
    cv.write(r.rows[row].first, r.rows[row].second, r.chains->x().data() + row * d);
  stats.target_forwards += 1;
  stats.head_rows_target += r.chains->net_rows();
  stats.target_transformer_seconds += r.transformer_seconds;
  stats.target_head_seconds += r.head_seconds;
  return static_cast<int64_t>(r.rows.size());
}

std::vector<std::vector<float>> mar_generate(const Mar& model, const GaussianDiffusion& diffusion,
                                             Backend& backend, const std::vector<int>& labels,
                                             const MarSamplingOptions& sampling,
                                             const MarNoise& noise,
                                             const std::function<void(int64_t)>& on_tokens,
                                             MarStats& stats) {
  const MarConfig& c = model.config();
  MarCanvas cv = new_canvas(c, labels, noise);
  const int L = cv.seq_len, d = cv.token_dim;
  const std::vector<int> lens = mask_lengths(L, sampling.num_iter);
  for (int s = 0; s < sampling.num_iter; ++s) {
    const auto predict = cv.step_positions(lens[s], s == sampling.num_iter - 1);
    const int64_t done =
        mar_target_step(model, diffusion, backend, cv, predict, cfg_at_step(sampling, L, lens[s]),
                        sampling.temperature, noise, stats, sampling.device_loop);
    if (on_tokens) on_tokens(done);
  }
  std::vector<std::vector<float>> out(cv.images);
  for (int b = 0; b < cv.images; ++b)
    out[b].assign(cv.tokens.begin() + static_cast<size_t>(b) * L * d,
                  cv.tokens.begin() + static_cast<size_t>(b + 1) * L * d);
  stats.images += cv.images;
  stats.tokens += static_cast<int64_t>(cv.images) * L;
  stats.token_origin.insert(stats.token_origin.end(), cv.images, std::vector<uint8_t>(L, 0));
  return out;
}

}  // namespace tessera
