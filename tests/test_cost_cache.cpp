// --draft-len auto's cost calibration (pipeline/cost_cache.h) as users meet it: measured on the
// first run and cached in $XDG_CACHE_HOME/tessera, reused by the next run (same costs, so the same
// images), and a corrupt cache file ignored with a note and written again.
#include "cli_harness.h"

#include <chrono>
#include <nlohmann/json.hpp>
#include <vector>

#include "pipeline/cost_cache.h"

namespace {

class CostCache : public CliTest {};

TEST_F(CostCache, MeasuredOnceReusedAndRebuiltWhenCorrupt) {
  const std::string env = "XDG_CACHE_HOME=" + shell_quote(tmp("cache"));
  auto generate = [&](const std::string& out) {
    return run({"generate", "-m", fixture("c2i_f32"), "--class", "1", "--method", "sjd",
                "--tokens-out", tmp(out)},
               env);
  };
  CliResult r = generate("a.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("measuring this model's forward costs"), std::string::npos) << r.err;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(tmp("cache") + "/tessera")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  const auto j = nlohmann::json::parse(slurp(files[0]));
  EXPECT_EQ(j["verify"].size(), 16u);  // a Jacobi window as long as the 16-token image
  EXPECT_NE(j["key"].get<std::string>().find("|threads "), std::string::npos);
  EXPECT_NE(j["key"].get<std::string>().find("|device cpu"), std::string::npos);

  r = generate("b.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err.find("measuring"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(tmp("a.npy")), slurp(tmp("b.npy")));  // the same costs choose the same lengths

  { std::ofstream(files[0]) << "{\"verify\": [1, "; }
  r = generate("c.npy");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("ignoring the corrupt cost cache"), std::string::npos) << r.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(files[0]))["verify"].size(), 16u);
}

// The calibration belongs to the models and the CPU setting it was measured with: weights written
// anew (another modification time, same bytes), an edited config.json or another thread count is
// another key, measured again and cached beside the first; the unchanged key is reused.
TEST_F(CostCache, ANewWeightsFileConfigOrThreadCountIsMeasuredAgain) {
  const fs::path model = tmp("model");
  fs::create_directories(model);
  for (const char* f : {"config.json", "gpt.safetensors"})
    fs::copy_file(fs::path(fixture("c2i_f32")) / f, model / f);
  const std::string env = "XDG_CACHE_HOME=" + shell_quote(tmp("cache"));
  auto measured = [&](const std::string& threads) {
    const CliResult r = run({"generate", "-m", model.string(), "--class", "1", "--method", "sjd",
                             "-t", threads, "--tokens-out", tmp("t.npy")},
                            env);
    EXPECT_EQ(r.code, 0) << r.err;
    return r.err.find("measuring this model's forward costs") != std::string::npos;
  };
  auto cached = [&] {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(tmp("cache") + "/tessera"))
      n += e.is_regular_file();
    return n;
  };
  EXPECT_TRUE(measured("1"));
  EXPECT_FALSE(measured("1"));
  EXPECT_EQ(cached(), 1u);

  const fs::path weights = model / "gpt.safetensors";
  const std::string bytes = slurp(weights);
  const auto before = fs::last_write_time(weights);
  fs::remove(weights);
  spit(weights, bytes);
  fs::last_write_time(weights, before + std::chrono::seconds(5));
  EXPECT_TRUE(measured("1")) << "the same key after the weights file was written anew";
  EXPECT_FALSE(measured("1"));
  EXPECT_EQ(cached(), 2u);

  spit(model / "config.json", slurp(model / "config.json") + "\n");  // the same settings
  EXPECT_TRUE(measured("1")) << "the same key after config.json changed";
  EXPECT_EQ(cached(), 3u);

  EXPECT_TRUE(measured("2")) << "the same key at another thread count";
  EXPECT_FALSE(measured("2"));
  EXPECT_FALSE(measured("1"));
  EXPECT_EQ(cached(), 4u);
}

// A calibration belongs to the device it was measured on: the CPU's is never used for a GPU.
TEST(CostCacheKey, TheDeviceIsPartOfTheKey) {
  const tessera::ModelConfig c = tessera::load_model_config(fixture("c2i_f32"));
  const tessera::CostModel target{nullptr, &c};
  const std::string cpu = tessera::draft_costs_key(target, {}, false, 4, "cpu");
  EXPECT_EQ(cpu, tessera::draft_costs_key(target, {}, false, 4, "cpu"));
  EXPECT_NE(cpu, tessera::draft_costs_key(target, {}, false, 4, "cuda:0"));
  EXPECT_NE(tessera::draft_costs_key(target, {}, false, 4, "cuda:0"),
            tessera::draft_costs_key(target, {}, false, 4, "cuda:1"));
  EXPECT_NE(cpu.find("|device cpu"), std::string::npos) << cpu;
}

// A calibration whose costs fall with k (a shorter forward timed dearer than a longer one: the
// machine was busy) is measured again; a steady one is kept at once.
TEST(CostCalibration, BusyMeasurementsAreTakenAgain) {
  using tessera::calibrate_until_steady;
  using tessera::largest_cost_fall;
  EXPECT_DOUBLE_EQ(largest_cost_fall({0.9, 1.0, 1.1}), 1.0);
  EXPECT_DOUBLE_EQ(largest_cost_fall({0.9, 0.9, 1.1}), 1.0);
  EXPECT_NEAR(largest_cost_fall({2.75, 2.77, 2.25, 2.05, 2.15}), 2.77 / 2.05, 1e-12);
  EXPECT_DOUBLE_EQ(largest_cost_fall({1.0, 3.0, 2.0, 4.0}), 1.5);
  EXPECT_DOUBLE_EQ(largest_cost_fall({5.0}), 1.0);
  EXPECT_DOUBLE_EQ(largest_cost_fall({}), 1.0);

  const std::vector<double> busy = {2.75, 2.77, 2.25, 2.05}, busier = {3.0, 1.0, 1.1, 1.2},
                            steady = {0.85, 0.89, 0.94, 1.0}, noisy = {0.85, 0.89, 0.88, 1.0};
  auto sequence = [](std::vector<std::vector<double>> m, int& calls) {
    return [m, &calls] { return m[static_cast<size_t>(calls++)]; };
  };
  int calls = 0;
  EXPECT_EQ(calibrate_until_steady(sequence({steady}, calls)), steady);
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_EQ(calibrate_until_steady(sequence({noisy}, calls)), noisy);  // a 1% fall is noise
  EXPECT_EQ(calls, 1);
  calls = 0;
  EXPECT_EQ(calibrate_until_steady(sequence({busy, steady}, calls)), steady);
  EXPECT_EQ(calls, 2);
  calls = 0;  // never steady: the attempt that fell least
  EXPECT_EQ(calibrate_until_steady(sequence({busier, busy, busier}, calls)), busy);
  EXPECT_EQ(calls, 3);
}

}  // namespace
