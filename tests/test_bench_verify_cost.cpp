// `tessera bench --verify-cost`: the forward-cost curve against the roofline, in md, csv and json,
// and bad k ranges refused with one error line before anything runs.
#include "cli_harness.h"

#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/bandwidth.h"
#include "tessera/error.h"

namespace {

class BenchVerifyCost : public CliTest {};

TEST_F(BenchVerifyCost, CsvColumnsParse) {
  const CliResult r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "1:4",
                           "-r", "1", "-o", "csv", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line,
            "k,rows,seconds,ratio,roofline_seconds,roofline_ratio,gflops,fraction_of_roofline");
  int k = 0;
  while (std::getline(in, line)) {
    ++k;
    std::istringstream row(line);
    std::vector<double> v;
    for (std::string cell; std::getline(row, cell, ',');) v.push_back(std::stod(cell));
    ASSERT_EQ(v.size(), 8u) << line;
    EXPECT_EQ(v[0], k);
    EXPECT_EQ(v[1], 2 * k);  // the fixture samples with CFG: two rows per position
    EXPECT_GT(v[2], 0.0);
    if (k == 1) {
      EXPECT_DOUBLE_EQ(v[3], 1.0);
    }
    EXPECT_GT(v[4], 0.0);
    EXPECT_GE(v[5], 1.0);  // the bound never falls with k
    EXPECT_GT(v[7], 0.0);
  }
  EXPECT_EQ(k, 4);
}

TEST_F(BenchVerifyCost, JsonAndMarkdown) {
  CliResult r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "2:3",
                     "--cfg", "1", "-r", "1", "-o", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["read_bandwidth_gbs"].get<double>(), 0.0);
  EXPECT_GT(j["f32_fma_gflops"].get<double>(), 0.0);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["k"], 2);
  EXPECT_EQ(j["rows"][0]["rows"], 2);  // --cfg 1: one row per position
  // The read-with-FMA probe: 1 to 32 rows, each against max(its 1-row read, its FMAs at peak).
  const auto& probe = j["read_with_fma_probe"];
  ASSERT_EQ(probe.size(), 8u);
  EXPECT_EQ(probe[0]["rows"], 1);
  EXPECT_EQ(probe[7]["rows"], 32);
  EXPECT_DOUBLE_EQ(probe[0]["fraction_of_roofline"].get<double>(), 1.0);  // its own reference
  for (const auto& p : probe) {
    EXPECT_GT(p["read_gbs"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(p["flops_per_byte"].get<double>(), p["rows"].get<int>() / 2.0);
    EXPECT_GT(p["compute_over_read"].get<double>(), 0.0);
  }
  r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "2", "-r", "1", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| k | rows | ms | ratio to k=1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| rows | flop/B | GB/s | arithmetic / read time | of roofline |"),
            std::string::npos)
      << r.out;
}

// The probe itself: one rate per entry, and rows outside 1-32 refused.
TEST(ReadWithFmaProbe, OneRatePerRowCountAndBadRowsRefused) {
  const std::vector<double> gbs = tessera::memory_read_with_fma_gbs({1, 3, 12, 13, 32}, 1 << 20, 1);
  ASSERT_EQ(gbs.size(), 5u);
  for (double g : gbs) EXPECT_GT(g, 0.0);
  EXPECT_THROW(tessera::memory_read_with_fma_gbs({0}, 1 << 20, 1), tessera::Error);
  EXPECT_THROW(tessera::memory_read_with_fma_gbs({33}, 1 << 20, 1), tessera::Error);
}

TEST_F(BenchVerifyCost, BadRangesFailWithOneLine) {
  for (const char* range : {"0:4", "5:2", "x", "1:", "1:100000"}) {
    SCOPED_TRACE(range);
    const CliResult r =
        run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", range, "-q"});
    EXPECT_NE(r.code, 0);
    EXPECT_NE(r.err.find("--k-range"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const CliResult r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--methods", "sd"});
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--methods does not apply to --verify-cost"), std::string::npos) << r.err;
  const CliResult k = run({"bench", "-m", fixture("c2i_f32"), "--k-range", "1:2"});
  EXPECT_NE(k.code, 0);
  EXPECT_NE(k.err.find("--k-range applies to --verify-cost"), std::string::npos) << k.err;
}

// --draft-len auto (the default) in the method bench: the row says auto and reports the mean
// depth it chose.
TEST_F(BenchVerifyCost, MethodBenchReportsAutoLengths) {
  const CliResult r =
      run({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "-n", "1", "-o", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  const auto& sjd = j["methods"][1];
  EXPECT_EQ(sjd["draft_len"], "auto");
  // The first round (the class token) and rounds at the image's end may draft nothing.
  EXPECT_GT(sjd["mean_draft_depth"].get<double>(), 0.0);
  const auto& by_depth = sjd["rounds_by_draft_depth"];
  ASSERT_GE(by_depth.size(), 2u);
  int drafted = 0;
  for (size_t d = 1; d < by_depth.size(); ++d) drafted += by_depth[d].get<int>();
  EXPECT_GT(drafted, 0);
}

}  // namespace
