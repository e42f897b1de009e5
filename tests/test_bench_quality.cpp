// `tessera bench --methods` with image quality (tessera/quality.h, docs/quality.md): the emoji
// classifier next to the model is found, every method (and a second vanilla run on other seeds,
// the noise floor) gets top-1, Frechet distance to vanilla and diversity with intervals, and the
// quality columns can tell a lossless method from one that ruins the images.
#include "cli_harness.h"

#include <nlohmann/json.hpp>

namespace {

const std::string kEmoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji";

class BenchQuality : public CliTest {};

TEST_F(BenchQuality, EveryMethodGetsQualityColumns) {
  // The draft trained on the data (draft-data), not the distilled one: accepting nearly every
  // draft of the distilled draft keeps the drawings (it agrees with the target ~90% of the time),
  // so it would not make a ruined method for the metrics to catch.
  const CliResult r =
      run({"bench", "-m", kEmoji + "/target", "--draft", kEmoji + "/draft-data", "--methods",
           "sd,addition", "--addition-eps", "0.9", "-n", "12", "-b", "12", "--json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["classifier"].get<std::string>().find("classifier"), std::string::npos);
  std::map<std::string, nlohmann::json> q;
  for (const auto& m : j["methods"]) q[m["method"].get<std::string>()] = m["quality"];
  ASSERT_EQ(q.size(), 4u);  // vanilla, vanilla*, sd, addition
  for (const auto& [name, x] : q) {
    SCOPED_TRACE(name);
    EXPECT_EQ(x["n"], 12);
    EXPECT_EQ(x["classes"], 6);  // two images per class
    EXPECT_LE(x["top1"]["lo"].get<double>(), x["top1"]["value"].get<double>());
    EXPECT_GE(x["top1"]["hi"].get<double>(), x["top1"]["value"].get<double>());
    EXPECT_FALSE(x["diversity"].is_null());
    EXPECT_EQ(x["frechet_vs_vanilla"].is_null(), name == "vanilla");
    ASSERT_FALSE(x["frechet_vs_train"].is_null());  // the classifier ships train statistics
    EXPECT_GT(x["frechet_vs_train"]["value"].get<double>(), 0.0);
  }
  // Lossless sd stays near vanilla; addition with ε = 0.9 accepts nearly every draft and ruins
  // the images: lower top-1, and a Frechet distance well above the vanilla-vs-vanilla floor.
  EXPECT_GE(q["vanilla"]["top1"]["value"].get<double>(), 0.6);
  EXPECT_GE(q["sd"]["top1"]["value"].get<double>(), 0.5);
  EXPECT_LT(q["addition"]["top1"]["value"].get<double>(),
            q["vanilla"]["top1"]["value"].get<double>());
  EXPECT_GT(q["addition"]["frechet_vs_vanilla"]["value"].get<double>(),
            1.5 * q["vanilla*"]["frechet_vs_vanilla"]["value"].get<double>());
  // No ordering is asserted for the distance to the training set: 12 images of 6 classes are far
  // from the whole training set's statistics whatever the method (vanilla 408, addition 317).
}

TEST_F(BenchQuality, OffAndLegend) {
  const CliResult r = run({"bench", "-m", kEmoji + "/target", "--methods", "sjd", "-n", "2",
                           "--quality", "off", "--legend", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.find("top-1 %"), std::string::npos);
  EXPECT_NE(r.out.find("speed-up   vanilla's s/image"), std::string::npos) << r.out;
  expect_error({"bench", "-m", kEmoji + "/target", "--methods", "sjd", "--quality", tmp("none")},
               {"--quality", "not a classifier directory"});
  expect_error({"bench", "-m", kEmoji + "/target", "--quality", "off"}, {"--quality", "--methods"});
}

}  // namespace
