// `tessera bench --verify-cost`: the forward-cost curve against the roofline, with the device
// loop's verification of k - 1 drafts beside it, in md, csv and json, and bad k ranges refused
// with one error line before anything runs.
#include "cli_harness.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "tessera/bandwidth.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

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
            "k,rows,seconds,ratio,roofline_seconds,roofline_ratio,gflops,fraction_of_roofline,"
            "measurement_error,verify_seconds,verify_over_forward");
  int k = 0;
  while (std::getline(in, line)) {
    ++k;
    std::istringstream row(line);
    std::vector<double> v;
    for (std::string cell; std::getline(row, cell, ',');) v.push_back(std::stod(cell));
    ASSERT_EQ(v.size(), 11u) << line;
    EXPECT_EQ(v[0], k);
    EXPECT_EQ(v[1], 2 * k);  // the fixture samples with CFG: two rows per position
    EXPECT_GT(v[2], 0.0);
    if (k == 1) {
      EXPECT_DOUBLE_EQ(v[3], 1.0);
    }
    EXPECT_GT(v[4], 0.0);
    EXPECT_GE(v[5], 1.0);  // the bound never falls with k
    EXPECT_GT(v[7], 0.0);
    EXPECT_EQ(v[8], v[7] > 1.1 ? 1.0 : 0.0);
    // The device loop's verification of k - 1 drafts (none at k = 1), and its share.
    if (k == 1) {
      EXPECT_EQ(v[9], 0.0);
    } else {
      EXPECT_GT(v[9], 0.0);
      // As printed: the forward's seconds to 1 us, the share to 1e-4 (of the forward).
      EXPECT_NEAR(v[10] * v[2], v[9], 1e-6 + 1e-4 * v[2]);
    }
  }
  EXPECT_EQ(k, 4);
  // A read bandwidth given far too low (1 kB/s): every row a measurement error, and stderr says so.
  const CliResult g = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "1:2",
                           "-r", "1", "-o", "csv", "-q", "--read-gbs", "1e-6"});
  ASSERT_EQ(g.code, 0) << g.err;
  std::istringstream flagged(g.out);
  std::getline(flagged, line);  // the header
  int rows_flagged = 0;
  while (std::getline(flagged, line)) {
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, ',');) cells.push_back(cell);
    ASSERT_EQ(cells.size(), 11u) << line;
    EXPECT_EQ(cells[8], "1") << line;  // measurement_error
    ++rows_flagged;
  }
  EXPECT_EQ(rows_flagged, 2) << g.out;
  EXPECT_NE(g.err.find("warning: 2 row(s) at more than 110% of the roofline"), std::string::npos)
      << g.err;
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
  EXPECT_EQ(j["rows"][0]["rows"], 2);                            // --cfg 1: one row per position
  EXPECT_GT(j["rows"][0]["verify_seconds"].get<double>(), 0.0);  // a chain of 1 draft
  EXPECT_GT(j["rows"][1]["verify_over_forward"].get<double>(), 0.0);
  // The read-with-FMA probe: 1 to 32 rows, each against max(its 1-row read, its FMAs at peak).
  const auto& probe = j["read_with_fma_probe"];
  ASSERT_EQ(probe.size(), 8u);
  EXPECT_EQ(probe[0]["rows"], 1);
  EXPECT_EQ(probe[7]["rows"], 32);
  // Its own read reference: 1, unless the measured FMA peak makes even one row compute-bound (a
  // slow peak under ASan measured 1.17): the roofline is the larger of the two.
  EXPECT_NEAR(probe[0]["fraction_of_roofline"].get<double>(),
              std::max(1.0, probe[0]["compute_over_read"].get<double>()), 1e-12);
  for (const auto& p : probe) {
    EXPECT_GT(p["read_gbs"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(p["flops_per_byte"].get<double>(), p["rows"].get<int>() / 2.0);
    EXPECT_GT(p["compute_over_read"].get<double>(), 0.0);
  }
  // md, with a read bandwidth given far too low (1 kB/s): the row is far above its roofline,
  // marked, and the note under the tables says why.
  r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "2", "-r", "1", "-q",
           "--read-gbs", "1e-6"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("read bandwidth 0.0 GB/s (given)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| k | rows | ms | ratio to k=1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| verify ms (k - 1 drafts) | verify / forward |"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("% (!) |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n(!) more than 110% of the roofline: a measurement error"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("| rows | flop/B | GB/s | arithmetic / read time | of roofline |"),
            std::string::npos)
      << r.out;
}

// The probe's arithmetic against its closed form (tessera/bandwidth.h), for every row count: the
// sum says the FMAs timed for a row count were that row count's. Over P panel rows of 32 weights,
// row p holds w = ((32 p + c) mod 1024) 1e-3, c < 32, so W(p) = sum_c w = 1e-3 (1024 (p mod 32) +
// 496), and meets the activation set k = p mod 128, X_R(k) = sum_{r<R} (1 + 1e-3 ((k R + r) mod
// 97)): sum = (P div 128) sum_{k<128} W(k) X_R(k) + sum_{k < P mod 128} W(k) X_R(k). P is not a
// multiple of 128 (nor of the thread count), so threads start mid-period.
TEST(ReadWithFmaProbe, ArithmeticMatchesTheClosedFormForEveryRowCount) {
  const size_t panels = 64 * 128 + 77, bytes = panels * 32 * sizeof(float);
  std::vector<int> rows(32);
  std::iota(rows.begin(), rows.end(), 1);
  const std::vector<tessera::ReadWithFmaProbe> got = tessera::memory_read_with_fma(rows, bytes, 1);
  ASSERT_EQ(got.size(), rows.size());
  for (int R = 1; R <= 32; ++R) {
    auto term = [R](size_t k) {
      double x = 0.0;
      for (int r = 0; r < R; ++r) x += 1.0 + 1e-3 * static_cast<double>((k * R + r) % 97);
      return 1e-3 * (1024.0 * static_cast<double>(k % 32) + 496.0) * x;
    };
    double head = 0.0, rest = 0.0;  // k < P mod 128, and the rest of a period
    for (size_t k = 0; k < 128; ++k) (k < panels % 128 ? head : rest) += term(k);
    const double want = static_cast<double>(panels / 128) * (head + rest) + head;
    const tessera::ReadWithFmaProbe& p = got[R - 1];
    EXPECT_EQ(p.rows, R);
    EXPECT_GT(p.read_gbs, 0.0) << "rows " << R;
    // f32 accumulation over ~8000 panel rows per accumulator lane: well under 1e-4 relative. One
    // row fewer or more changes the sum by at least 1/33.
    EXPECT_NEAR(p.sum, want, 1e-4 * want) << "rows " << R;
  }
  EXPECT_THROW(tessera::memory_read_with_fma({0}, 1 << 20, 1), tessera::Error);
  EXPECT_THROW(tessera::memory_read_with_fma({33}, 1 << 20, 1), tessera::Error);
}

// A time below its roofline bound by more than 10% is a measurement error, and the output says
// so: rows are flagged exactly when their fraction exceeds 1.1, on the measured bound and on one
// whose read bandwidth (--read-gbs) is 5x too low for k = 1. (md and csv: the tests above.)
TEST_F(BenchVerifyCost, FractionsAboveTheRooflineAreFlagged) {
  auto check_flags = [](const nlohmann::json& j) {
    int errors = 0;
    for (const char* table : {"rows", "read_with_fma_probe"})
      for (const auto& row : j[table]) {
        const bool over = row["fraction_of_roofline"].get<double>() > 1.1;
        EXPECT_EQ(row["measurement_error"].get<bool>(), over) << row;
        errors += over;
      }
    EXPECT_EQ(j["measurement_errors"].get<int>(), errors);
    EXPECT_DOUBLE_EQ(j["measurement_error_above"].get<double>(), 1.1);
  };
  CliResult r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "1:3",
                     "--cfg", "1", "-r", "2", "-o", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto measured = nlohmann::json::parse(r.out);
  check_flags(measured);
  EXPECT_FALSE(measured["read_bandwidth_given"].get<bool>());

  const double t1 = measured["rows"][0]["seconds"].get<double>();
  const std::string gbs = std::to_string(measured["weight_bytes"].get<double>() / (5.0 * t1) / 1e9);
  r = run({"bench", "--verify-cost", "-m", fixture("c2i_f32"), "--k-range", "1:3", "--cfg", "1",
           "-r", "2", "-o", "json", "-q", "--read-gbs", gbs});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto given = nlohmann::json::parse(r.out);
  EXPECT_TRUE(given["read_bandwidth_given"].get<bool>());
  EXPECT_NEAR(given["read_bandwidth_gbs"].get<double>(), std::stod(gbs), 1e-9 * std::stod(gbs));
  check_flags(given);
  // About 5 (the forward's time varies between runs, not by 4.5x).
  EXPECT_GT(given["rows"][0]["fraction_of_roofline"].get<double>(), 1.1);
  EXPECT_TRUE(given["rows"][0]["measurement_error"].get<bool>());
}

// forward_flops, on which the roofline rests, against a count by hand. Both fixtures' GPTs: dim
// 64, 2 layers, 4 heads of 16 (as many KV heads), FFN 256, vocabulary 256. Weights read per row:
// per layer wqkv 192 x 64 = 12288, wo 64 x 64 = 4096, w1 and w3 2 x 256 x 64 = 32768, w2 64 x 256
// = 16384, so 65536; two layers 131072, the head 256 x 64 = 16384: 147456, 2 flops each. Attention
// per row and layer: QK^T and AV over the context, 2 x 64 x context flops each; the context is the
// prefix, half the 16-token image (what forward_seconds times after) and the mean of the k new
// rows' own positions, (k - 1) / 2.
TEST(ForwardFlops, MatchesAHandCount) {
  tessera::LoadOptions lo;
  lo.load_decoder = false;
  {
    // c2i (a 1-position class prefix) with CFG, k = 3: 6 rows; context 1 + 8 + 1 = 10.
    auto p = tessera::Pipeline::load(fixture("c2i_f32"), lo);
    const tessera::ForwardFlops f = p->forward_flops(3, true);
    EXPECT_DOUBLE_EQ(f.matmul, 2.0 * 147456 * 6);              // 1769472
    EXPECT_DOUBLE_EQ(f.attention, 2 * 2.0 * 64 * 10 * 2 * 6);  // 30720
    EXPECT_DOUBLE_EQ(f.total(), 1769472.0 + 30720.0);
  }
  {
    // t2i (an 8-position caption prefix) without CFG, k = 4: 4 rows; context 8 + 8 + 1.5 = 17.5.
    auto p = tessera::Pipeline::load(fixture("t2i_f32"), lo);
    const tessera::ForwardFlops f = p->forward_flops(4, false);
    EXPECT_DOUBLE_EQ(f.matmul, 2.0 * 147456 * 4);                // 1179648
    EXPECT_DOUBLE_EQ(f.attention, 2 * 2.0 * 64 * 17.5 * 2 * 4);  // 35840
  }
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
  const CliResult g = run({"bench", "-m", fixture("c2i_f32"), "--read-gbs", "10"});
  EXPECT_NE(g.code, 0);
  EXPECT_NE(g.err.find("--read-gbs applies to --verify-cost"), std::string::npos) << g.err;
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
