// The hawk methods from the command line (issue 43): --stats-out reports where Hawk's vertical
// proposals were accepted (overall and per column of the grid, Hawk §5.2's claim that vertical
// heads help in detailed regions), and --heatmap-out paints those cells magenta.
#include "cli_harness.h"

#include <nlohmann/json.hpp>
#include <set>

#include "tessera/image_io.h"

namespace {

class CliHawk : public CliTest {};

TEST_F(CliHawk, StatsAndHeatmapShowTheVerticalProposalsAccepted) {
  const CliResult r = run({"generate",
                           "-m",
                           fixture("../spec/micro_target"),
                           "--class",
                           "1",
                           "--method",
                           "hawk",
                           "--draft",
                           fixture("../spec/micro_hawk"),
                           "--draft-len",
                           "2",
                           "-n",
                           "20",
                           "--tokens-out",
                           tmp("t.npy"),
                           "--stats-out",
                           tmp("s.json"),
                           "--heatmap-out",
                           tmp("h.png"),
                           "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(tmp("s.json")));
  ASSERT_TRUE(j.contains("vertical_proposals_accepted")) << j.dump(1);
  const auto& v = j["vertical_proposals_accepted"];
  const int64_t vertical = v["vertical"].get<int64_t>();
  EXPECT_GT(vertical, 0);
  EXPECT_LT(vertical, v["accepted_drafts"].get<int64_t>());
  EXPECT_DOUBLE_EQ(v["share"].get<double>(),
                   static_cast<double>(vertical) / v["accepted_drafts"].get<int64_t>());
  ASSERT_EQ(v["share_by_column"].size(), 2u);  // the 2x2 grid's columns
  // Per image: the counts add up, and each image with a vertical acceptance has a magenta cell.
  int64_t sum = 0;
  int magenta_images = 0;
  for (size_t i = 0; i < j["per_image"].size(); ++i) {
    const auto& im = j["per_image"][i];
    const int64_t n = im.contains("vertical_proposals_accepted")
                          ? im["vertical_proposals_accepted"]["vertical"].get<int64_t>()
                          : 0;
    sum += n;
    char name[32];
    std::snprintf(name, sizeof name, "h_%04zu.png", i);
    int w = 0, h = 0;
    const std::vector<uint8_t> px = tessera::read_png(tmp(name), w, h);
    bool magenta = false;
    for (size_t p = 0; p + 2 < px.size(); p += 3)
      magenta = magenta || (px[p] == 230 && px[p + 1] == 40 && px[p + 2] == 200);
    EXPECT_EQ(magenta, n > 0) << name;
    magenta_images += magenta;
  }
  EXPECT_EQ(sum, vertical);
  EXPECT_GT(magenta_images, 0);
}

// Other methods report no vertical proposals.
TEST_F(CliHawk, OtherMethodsHaveNoVerticalProposals) {
  const CliResult r = run({"generate", "-m", fixture("../spec/micro_target"), "--class", "1",
                           "--method", "medusa", "--draft", fixture("../spec/micro_medusa"), "-n",
                           "2", "--tokens-out", tmp("t.npy"), "--stats-out", tmp("s.json"), "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(slurp(tmp("s.json"))).contains("vertical_proposals_accepted"));
}

// A method that takes a draft model drafts with heads given as --draft (Hawk Table 1's "Medusa
// with LANTERN++"); the stats and bench name the tree the heads drafted, their default when no
// --tree is given (Hawk's pools' Cartesian product, Medusa's chain of top-1 tokens).
TEST_F(CliHawk, RelaxedRulesDraftWithHeads) {
  CliResult r = run({"generate", "-m", fixture("../spec/micro_target"), "--class", "1", "--method",
                     "lantern++", "--draft", fixture("../spec/micro_hawk"), "--draft-len", "2",
                     "-n", "20", "--tokens-out", tmp("t.npy"), "--stats-out", tmp("s.json"), "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(slurp(tmp("s.json")));
  EXPECT_EQ(j["tree"], "kary:2,2");
  EXPECT_GT(j["mean_draft_nodes"].get<double>(), 1.0);
  ASSERT_TRUE(j.contains("vertical_proposals_accepted")) << j.dump(1);
  r = run({"generate", "-m", fixture("../spec/micro_target"), "--class", "1", "--method",
           "lantern++", "--draft", fixture("../spec/micro_medusa"), "-n", "2", "--tokens-out",
           tmp("t.npy"), "--stats-out", tmp("s.json"), "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  j = nlohmann::json::parse(slurp(tmp("s.json")));
  EXPECT_EQ(j["tree"], "chain:3");
  EXPECT_FALSE(j.contains("vertical_proposals_accepted"));
  r = run({"bench", "-m", fixture("../spec/micro_target"), "--class", "1", "--methods",
           "hawk,lantern++", "--draft", fixture("../spec/micro_hawk"), "-n", "2", "--quality",
           "off", "-o", "json", "-q"});
  ASSERT_EQ(r.code, 0) << r.err;
  std::set<std::pair<std::string, std::string>> seen;
  j = nlohmann::json::parse(r.out);
  for (const auto& row : j["methods"])
    seen.insert({row["method"], row["tree"].is_null() ? "-" : row["tree"].get<std::string>()});
  const std::set<std::pair<std::string, std::string>> want = {
      {"vanilla", "-"}, {"hawk", "kary:2,2"}, {"lantern++", "kary:2,2"}};
  EXPECT_EQ(seen, want);
  // An EAGLE method still refuses heads, naming what they draft for.
  expect_error({"generate", "-m", fixture("../spec/micro_target"), "--class", "1", "--method",
                "eagle", "--draft", fixture("../spec/micro_hawk"), "-o", tmp("x.png")},
               {"Hawk's heads", "hawk, hawk-vertical or a method that takes a draft model"});
}

}  // namespace
