// Captured graphs by shape (src/tensor/backend.h's GraphCache): a key is captured once and
// replayed after, a backend that records none runs the ops each time, and past its capacity the
// least recently used graph is dropped (captured again if its shape comes back), so shapes that
// vary do not pile up graphs.
#include <gtest/gtest.h>

#include "counting_backend.h"
#include "tensor/backend.h"

using namespace tessera;

TEST(GraphCache, ReplaysEachShapeAndDropsTheLeastRecentlyUsed) {
  test::CountingBackend counting;
  counting.record_graphs = true;
  GraphCache graphs(2);
  int ran = 0;
  const auto ops = [&] { ++ran; };
  EXPECT_TRUE(graphs.replay_or_run(counting, 1, ops));  // captured, then replayed
  EXPECT_TRUE(graphs.replay_or_run(counting, 2, ops));
  EXPECT_TRUE(graphs.replay_or_run(counting, 1, ops));  // 1 is now the more recent
  EXPECT_EQ(counting.captures, 2);
  EXPECT_EQ(counting.replays, 3);
  EXPECT_EQ(ran, 3);
  EXPECT_TRUE(graphs.replay_or_run(counting, 3, ops));  // drops 2, the least recently used
  EXPECT_EQ(graphs.size(), 2u);
  EXPECT_EQ(counting.captures, 3);
  EXPECT_TRUE(graphs.replay_or_run(counting, 1, ops));  // kept
  EXPECT_EQ(counting.captures, 3);
  EXPECT_TRUE(graphs.replay_or_run(counting, 2, ops));  // captured again, dropping 3
  EXPECT_EQ(counting.captures, 4);
  EXPECT_TRUE(graphs.replay_or_run(counting, 1, ops));
  EXPECT_EQ(counting.captures, 4);
  EXPECT_EQ(ran, 7);
  graphs.clear();
  EXPECT_EQ(graphs.size(), 0u);

  // A backend that captures nothing: the ops run each time, nothing is replayed.
  counting.record_graphs = false;
  GraphCache direct;
  ran = 0;
  for (int k = 0; k < 3; ++k) EXPECT_FALSE(direct.replay_or_run(counting, 5, ops));
  EXPECT_EQ(ran, 3);
}
