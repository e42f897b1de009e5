// `tessera bench --methods` as llama-bench's users expect (issue 24): repeated timed runs with
// mean ± stddev, sweeps over threads, batch and draft length (every combination), md/csv/json
// output, and sweep flags refused where they would be ignored.
#include "cli_harness.h"

#include <nlohmann/json.hpp>
#include <set>

namespace {

class BenchMethods : public CliTest {};

TEST_F(BenchMethods, SweepsRepeatsAndJson) {
  const CliResult r =
      run({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "-n", "2", "--batches", "1,2",
           "--draft-lens", "3,4", "-r", "2", "-o", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["repeat"], 2);
  // vanilla once per batch (it has no draft length), sjd once per (batch, draft length).
  std::set<std::tuple<std::string, int, int>> seen;
  for (const auto& row : j["methods"]) {
    const std::string m = row["method"];
    const int dl = row["draft_len"].is_null() ? 0 : row["draft_len"].get<int>();
    seen.insert({m, row["batch"].get<int>(), dl});
    EXPECT_EQ(row["repeat"], 2);
    EXPECT_GE(row["seconds_per_image_stddev"].get<double>(), 0.0);
    EXPECT_GT(row["seconds_per_image_mean"].get<double>(), 0.0);
    if (m == "vanilla") {
      EXPECT_DOUBLE_EQ(row["speedup_vs_vanilla"].get<double>(), 1.0);
    }
  }
  const std::set<std::tuple<std::string, int, int>> want = {{"vanilla", 1, 0}, {"vanilla", 2, 0},
                                                            {"sjd", 1, 3},     {"sjd", 1, 4},
                                                            {"sjd", 2, 3},     {"sjd", 2, 4}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(j["methods"].size(), want.size());
}

TEST_F(BenchMethods, CsvAndMarkdown) {
  CliResult r =
      run({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "-n", "1", "-o", "csv", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("method,threads,batch,draft_len,tree,repeat,s_per_image,", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 3);  // header, vanilla, sjd
  r = run({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "-n", "1", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("| method | threads | batch | draft-len | tree | s/image |"),
            std::string::npos)
      << r.out;
}

// --trees: each method that drafts with a model runs once per tree (issue 41), Jacobi drafts as
// chains; the tree is a column of every format, quoted in CSV where a spec holds commas.
TEST_F(BenchMethods, TreesRunEachMethodPerTree) {
  CliResult r =
      run({"bench", "-m", fixture("c2i_f32"), "--draft", fixture("c2i_f32"), "--methods", "sd,sjd",
           "--trees", "chain", "kary:2,1", "--draft-len", "2", "-n", "1", "-o", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& row : j["methods"]) {
    seen.insert({row["method"], row["tree"].is_null() ? "-" : row["tree"].get<std::string>()});
    if (row["tree"] == "kary:2,1") {
      EXPECT_GT(row["mean_draft_nodes"].get<double>(), 2.0) << row;
    }
    if (row["tree"] == "chain") {
      EXPECT_LE(row["mean_draft_nodes"].get<double>(), 2.0) << row;
    }
  }
  const std::set<std::pair<std::string, std::string>> want = {
      {"vanilla", "-"}, {"sd", "chain"}, {"sd", "kary:2,1"}, {"sjd", "chain"}};
  EXPECT_EQ(seen, want);
  EXPECT_EQ(j["methods"].size(), want.size());
  r = run({"bench", "-m", fixture("c2i_f32"), "--draft", fixture("c2i_f32"), "--methods", "sd",
           "--trees", "kary:2,1", "-n", "1", "-o", "csv", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(",auto,\"kary:2,1\","), std::string::npos) << r.out;
}

TEST_F(BenchMethods, TreesErrors) {
  expect_error({"bench", "-m", fixture("c2i_f32"), "--trees", "chain"}, {"--trees", "--methods"});
  expect_error({"bench", "-m", fixture("c2i_f32"), "--draft", fixture("c2i_f32"), "--methods", "sd",
                "--tree", "kary:2", "--trees", "chain"},
               {"--tree", "--trees", "give one"});
  expect_error({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "--trees", "kary:2"},
               {"--trees", "Jacobi drafts are chains"});
  expect_error({"bench", "-m", fixture("c2i_f32"), "--draft", fixture("c2i_f32"), "--methods", "sd",
                "--trees", "chain", "bogus"},
               {"--methods sd", "--trees", "bogus"});
}

// Like generate, bench without -m runs the embedded emoji model, with its shipped draft.
TEST_F(BenchMethods, DefaultModelAndItsDraft) {
  const CliResult r =
      run({"bench", "--methods", "sd", "-n", "1", "-o", "json", "--quality", "off", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_NE(j["model"].get<std::string>().find("emoji/target"), std::string::npos) << j["model"];
  EXPECT_NE(j["draft"].get<std::string>().find("emoji/draft"), std::string::npos) << j["draft"];
}

TEST_F(BenchMethods, SweepFlagsNeedMethods) {
  expect_error({"bench", "-m", fixture("c2i_f32"), "--batches", "1,2"}, {"--batches", "--methods"});
  expect_error({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "-o", "xml"},
               {"--output-format"});
  expect_error({"bench", "-m", fixture("c2i_f32"), "--methods", "sjd", "--batches", "1,x"},
               {"--batches"});
}

}  // namespace
