// --draft-len auto's cost calibration (pipeline/cost_cache.h) as users meet it: measured on the
// first run and cached in $XDG_CACHE_HOME/tessera, reused by the next run (same costs, so the same
// images), and a corrupt cache file ignored with a note and written again.
#include "cli_harness.h"

#include <nlohmann/json.hpp>

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

}  // namespace
