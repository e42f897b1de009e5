// MAR's device loop (issue 42, item 4: DiffusionChains::use_device, sampling/diffusion_rows.h) on
// the CPU backend, where it must give the host chains' latents bit for bit: the same formulas
// (sampling/diffusion_math.h) and the same Philox noise, run where the head's outputs are. So the
// CPU tests check the wiring a GPU runs (Models.MarDeviceLoop* in the backend tests compare a GPU
// with the CPU). Cases: unguided and guided, two temperatures, the target alone, and the three
// continuous methods, whose draft and target chains stop at the test step, continue on the host
// and run on again; noise injected by a test (not Philox) steps on the host.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "decode/mar_sampler.h"
#include "speculative/continuous/cspd_loop.h"
#include "tensor/cpu/cpu_backend.h"
#include "tessera/config.h"
#include "tessera/mar.h"

using namespace tessera;

namespace {

const std::string kDir = std::string(TESSERA_FIXTURES) + "/mar/";
constexpr int kSteps = 50;  // respaced diffusion steps (as test_cspd_loop.cpp)

const Mar& model(const std::string& name) {
  static std::map<std::string, std::pair<ModelConfig, std::unique_ptr<Mar>>> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    ModelConfig c = load_model_config(kDir + name);
    auto m = std::make_unique<Mar>(c, cpu_backend());
    it = cache.emplace(name, std::make_pair(std::move(c), std::move(m))).first;
  }
  return *it->second.second;
}

const GaussianDiffusion& diffusion() {
  static const GaussianDiffusion g = [] {
    const MarConfig c = load_model_config(kDir + "target_f32").mar;
    return GaussianDiffusion(c.num_train_timesteps, kSteps, c.noise_schedule);
  }();
  return g;
}

PhiloxMarNoise noise_for(uint64_t seed, int images) {
  std::vector<uint64_t> idx(images);
  for (int i = 0; i < images; ++i) idx[i] = 100 + static_cast<uint64_t>(i);
  return PhiloxMarNoise(seed, idx);
}

// PhiloxMarNoise's draws behind another type: what a test's injected noise looks like.
class WrappedNoise final : public MarNoise {
 public:
  explicit WrappedNoise(const PhiloxMarNoise& inner) : inner_(inner) {}
  std::vector<int32_t> order(int image, int seq_len) const override {
    return inner_.order(image, seq_len);
  }
  void start(int image, int position, std::span<float> out) const override {
    inner_.start(image, position, out);
  }
  void step(int image, int position, int j, std::span<float> out) const override {
    inner_.step(image, position, j, out);
  }
  double uniform(int image, int position, uint32_t purpose, uint32_t k) const override {
    return inner_.uniform(image, position, purpose, k);
  }
  double normal(int image, int position, uint32_t purpose, uint32_t k) const override {
    return inner_.normal(image, position, purpose, k);
  }

 private:
  const PhiloxMarNoise& inner_;
};

}  // namespace

TEST(MarDeviceLoop, StepsTheHostChainsLatents) {
  constexpr int kImages = 3;
  const std::vector<int> labels = {1, 4, 7};
  for (const float cfg : {1.0f, 2.5f})
    for (const float temperature : {1.0f, 0.8f}) {
      SCOPED_TRACE("cfg " + std::to_string(cfg) + " temperature " + std::to_string(temperature));
      MarSamplingOptions s;
      s.num_iter = 6;
      s.cfg_scale = cfg;
      s.temperature = temperature;
      const PhiloxMarNoise noise = noise_for(11, kImages);
      MarStats host_stats, device_stats;
      s.device_loop = DeviceLoop::Off;
      const auto host = mar_generate(model("target_f32"), diffusion(), cpu_backend(), labels, s,
                                     noise, {}, host_stats);
      s.device_loop = DeviceLoop::On;
      const auto device = mar_generate(model("target_f32"), diffusion(), cpu_backend(), labels, s,
                                       noise, {}, device_stats);
      EXPECT_EQ(device, host);
      EXPECT_EQ(host_stats.device_steps, 0);
      EXPECT_EQ(device_stats.device_steps, s.num_iter) << "every MAR step on the device";
      EXPECT_EQ(device_stats.head_rows_target, host_stats.head_rows_target);
      // Auto is the host loop on the CPU.
      s.device_loop = DeviceLoop::Auto;
      MarStats auto_stats;
      mar_generate(model("target_f32"), diffusion(), cpu_backend(), labels, s, noise, {},
                   auto_stats);
      EXPECT_EQ(auto_stats.device_steps, 0);
    }
}

// The chains of the continuous methods stop at the test step, take a host step or a decided value
// and run on: the device loop's state goes up and comes back around each run.
TEST(MarDeviceLoop, ContinuousMethodsGiveTheHostLoopsImages) {
  constexpr int kImages = 6;
  const std::vector<int> labels(kImages, 3);
  for (const cspd::Variant v :
       {cspd::Variant::Exact, cspd::Variant::Paper, cspd::Variant::Reference}) {
    SCOPED_TRACE("variant " + std::to_string(static_cast<int>(v)));
    CspdSettings spec;
    spec.variant = v;
    spec.draft_len = 2;
    spec.prefill = 0.2f;
    spec.test_step = 25;
    MarSamplingOptions s;
    s.num_iter = 6;
    s.cfg_scale = 2.0f;
    const PhiloxMarNoise noise = noise_for(5, kImages);
    MarStats host_stats, device_stats;
    s.device_loop = DeviceLoop::Off;
    const auto host = cspd_generate(model("target_f32"), model("draft_f32"), diffusion(),
                                    cpu_backend(), labels, s, spec, noise, {}, host_stats);
    s.device_loop = DeviceLoop::On;
    const auto device = cspd_generate(model("target_f32"), model("draft_f32"), diffusion(),
                                      cpu_backend(), labels, s, spec, noise, {}, device_stats);
    EXPECT_EQ(device, host);
    EXPECT_EQ(device_stats.accepted, host_stats.accepted);
    EXPECT_GT(host_stats.drafted, 0);
    EXPECT_EQ(host_stats.device_steps, 0);
    EXPECT_EQ(device_stats.device_steps, device_stats.target_forwards + device_stats.draft_forwards)
        << "every pass's chains on the device";
  }
}

// Noise that is not MAR's Philox streams (tests inject arrays) cannot be drawn on a device: such
// chains step on the host, with the same latents.
TEST(MarDeviceLoop, InjectedNoiseStepsOnTheHost) {
  const std::vector<int> labels = {2, 5};
  MarSamplingOptions s;
  s.num_iter = 4;
  s.cfg_scale = 2.0f;
  s.device_loop = DeviceLoop::On;
  const PhiloxMarNoise noise = noise_for(3, 2);
  const WrappedNoise wrapped(noise);
  MarStats philox_stats, wrapped_stats;
  const auto on_device = mar_generate(model("target_f32"), diffusion(), cpu_backend(), labels, s,
                                      noise, {}, philox_stats);
  const auto on_host = mar_generate(model("target_f32"), diffusion(), cpu_backend(), labels, s,
                                    wrapped, {}, wrapped_stats);
  EXPECT_EQ(on_device, on_host);
  EXPECT_EQ(philox_stats.device_steps, s.num_iter);
  EXPECT_EQ(wrapped_stats.device_steps, 0);
}

// A pass stopped half way (as the continuous methods stop theirs): the chains' whole state (x, the
// last step's mean and log variance, the summed log std) is the host chains', read back at the end
// of the run.
TEST(MarDeviceLoop, StoppedChainsHoldTheHostChainsState) {
  const std::vector<int> labels = {0, 6};
  const PhiloxMarNoise noise = noise_for(17, 2);
  const MarConfig& c = model("target_f32").config();
  MarCanvas cv = new_canvas(c, labels, noise);
  const auto predict = cv.step_positions(c.seq_len() / 2, false);
  auto pass = [&](DeviceLoop where) {
    return mar_step(model("target_f32"), diffusion(), cpu_backend(), cv, predict, 2.0f, 0.9f, noise,
                    20, where);
  };
  const MarStepResult host = pass(DeviceLoop::Off), device = pass(DeviceLoop::On);
  ASSERT_FALSE(host.chains->on_device());
  ASSERT_TRUE(device.chains->on_device());
  ASSERT_GT(host.chains->rows(), 0);
  EXPECT_EQ(device.chains->x(), host.chains->x());
  EXPECT_EQ(device.chains->mean(), host.chains->mean());
  EXPECT_EQ(device.chains->log_var(), host.chains->log_var());
  EXPECT_EQ(device.chains->sum_log_std(), host.chains->sum_log_std());
  EXPECT_EQ(device.chains->net_rows(), host.chains->net_rows());
  // Run on to the end from there: the state (sums included) goes up again.
  for (const MarStepResult* r : {&host, &device})
    r->chains->run(
        19, 0, [&](int row, int j, std::span<float> out) { r->step_noise(noise, row, j, out); });
  EXPECT_EQ(device.chains->x(), host.chains->x());
  EXPECT_EQ(device.chains->sum_log_std(), host.chains->sum_log_std());
}
