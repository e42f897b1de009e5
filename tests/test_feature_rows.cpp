// Drafters' feature rows on the backend. Draft heads' (speculative/drafters/feature_rows.h): each
// image's rows are the ones last put, both halves, whatever images came and went and however
// often the store grew. An EAGLE drafter's pending pairs (pending_features.h): each image's rows
// in the order appended, both halves, through growth, clearing and reuse.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "counting_backend.h"
#include "speculative/drafters/feature_rows.h"
#include "speculative/drafters/pending_features.h"

using namespace tessera;

TEST(FeatureRows, GatherGivesEachImagesLastRowsThroughGrowthAndReuse) {
  constexpr int D = 5, n = 6;
  test::CountingBackend counting;
  // Source rows: row r of the cond tensor holds 100 r + c, of the uncond one -(100 r + c).
  std::vector<float> a(n * D), b(n * D);
  for (int i = 0; i < n * D; ++i) a[i] = static_cast<float>(100 * (i / D) + i % D), b[i] = -a[i];
  Tensor cond = counting.upload(a.data(), DType::F32, {n, D});
  Tensor uncond = counting.upload(b.data(), DType::F32, {n, D});
  speculative::FeatureRows rows(counting, D, /*cfg=*/true, /*images=*/1);
  std::map<int, int> want;  // image id -> the source row it holds
  auto check_ids = [&](const std::vector<int>& ids) {
    Tensor out = counting.empty(DType::F32, {2 * static_cast<int64_t>(ids.size()) + 1, D});
    rows.gather(ids, out);
    const std::vector<float> got = download_f32(counting, out);
    const int m = static_cast<int>(ids.size());
    for (int i = 0; i < m; ++i)
      for (int c = 0; c < D; ++c) {
        const float v = static_cast<float>(100 * want.at(ids[i]) + c);
        EXPECT_EQ(got[i * D + c], v) << "image " << ids[i] << " cond";
        EXPECT_EQ(got[(m + i) * D + c], -v) << "image " << ids[i] << " uncond";
      }
  };
  for (int id = 0; id < 5; ++id) {  // grows from 1 slot to 8
    rows.put(id * 7, cond, id, &uncond, id);
    want[id * 7] = id;
  }
  check_ids({28, 0, 14});
  rows.put(14, cond, 5, &uncond, 5);  // an image's next round
  want[14] = 5;
  rows.erase(7);
  rows.erase(21);
  want.erase(7);
  want.erase(21);
  rows.put(3, cond, 1, &uncond, 1);  // a new image takes a freed slot
  want[3] = 1;
  check_ids({0, 3, 14, 28});
  counting.downloads = counting.syncs = counting.writes = 0;
  rows.put(0, cond, 2, &uncond, 2);
  EXPECT_EQ(counting.downloads + counting.syncs + counting.writes, 0)
      << "a put stays on the backend";
  want[0] = 2;
  check_ids({0});
  // Without CFG one half.
  speculative::FeatureRows plain(counting, D, /*cfg=*/false, 2);
  plain.put(9, cond, 4, nullptr, 0);
  Tensor out = counting.empty(DType::F32, {1, D});
  plain.gather(std::vector<int>{9}, out);
  EXPECT_EQ(download_f32(counting, out)[3], 403.0f);
}

TEST(PendingFeatures, EachImageReadsItsRowsInOrderThroughGrowthAndReuse) {
  constexpr int D = 3, n = 50;
  test::CountingBackend counting;
  // Source rows: row r of cond holds 100 r + c, of uncond -(100 r + c) - 1.
  std::vector<float> a(n * D), b(n * D);
  for (int i = 0; i < n * D; ++i)
    a[i] = static_cast<float>(100 * (i / D) + i % D), b[i] = -a[i] - 1;
  Tensor cond = counting.upload(a.data(), DType::F32, {n, D});
  Tensor uncond = counting.upload(b.data(), DType::F32, {n, D});
  speculative::PendingFeatures pending(counting, D, /*cfg=*/true);
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> want;  // id -> (cond, uncond) rows
  auto append = [&](int id, std::vector<int64_t> c, std::vector<int64_t> u) {
    pending.append(id, cond, c, &uncond, u);
    for (size_t k = 0; k < c.size(); ++k) want[id].emplace_back(c[k], u[k]);
  };
  auto check_all = [&] {
    const std::vector<float> table = download_f32(counting, pending.table());
    for (int c = 0; c < D; ++c) EXPECT_EQ(table[c], 0.0f) << "row 0 stays zeros";
    for (const auto& [id, rows] : want) {
      ASSERT_EQ(pending.count(id), static_cast<int>(rows.size())) << "image " << id;
      for (size_t k = 0; k < rows.size(); ++k)
        for (int c = 0; c < D; ++c) {
          const size_t cr = static_cast<size_t>(pending.at(id, 0, static_cast<int>(k)));
          const size_t ur = static_cast<size_t>(pending.at(id, 1, static_cast<int>(k)));
          EXPECT_EQ(table[cr * D + c], a[rows[k].first * D + c]) << id << " row " << k;
          EXPECT_EQ(table[ur * D + c], b[rows[k].second * D + c]) << id << " row " << k;
        }
    }
  };
  // A prefill's run of rows (copied in runs), then rounds' scattered ones; past the 64 rows the
  // table starts with.
  std::vector<int64_t> run(20), run_u(20);
  for (int k = 0; k < 20; ++k) run[k] = k, run_u[k] = 20 + k;
  append(1, run, run_u);
  append(2, {5, 9, 10, 11}, {1, 2, 3, 49});
  append(1, {30, 31}, {40, 41});
  check_all();
  pending.clear(2);  // fed
  want.erase(2);
  append(3, {7}, {8});  // takes a freed row
  for (int id = 4; id < 9; ++id) append(id, {id, id + 1, id + 2}, {id + 3, id + 4, id + 5});
  check_all();
  counting.downloads = counting.syncs = counting.writes = 0;
  append(3, {44, 45}, {46, 47});
  EXPECT_EQ(counting.downloads + counting.syncs + counting.writes, 0)
      << "an append stays on the backend";
  check_all();
  // Without CFG one half.
  speculative::PendingFeatures plain(counting, D, /*cfg=*/false);
  plain.append(9, cond, std::vector<int64_t>{4}, nullptr, {});
  EXPECT_EQ(download_f32(counting, plain.table())[plain.at(9, 0, 0) * D + 2], 402.0f);
}
