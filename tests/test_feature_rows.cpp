// Draft heads' feature rows on the backend (speculative/drafters/feature_rows.h): each image's
// rows are the ones last put, both halves, whatever images came and went and however often the
// store grew.
#include <gtest/gtest.h>

#include <map>
#include <vector>

#include "counting_backend.h"
#include "speculative/drafters/feature_rows.h"

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
