#include "heatmap.h"

#include <algorithm>

#include "tessera/image_io.h"

namespace tessera::cli {

void write_acceptance_heatmap(const std::string& path, const std::vector<uint8_t>& depth, int grid,
                              int max_depth, const std::string& description,
                              const std::vector<uint8_t>& vertical) {
  const int cell = std::max(2, 256 / std::max(grid, 1));  // about 256 px per side
  const int W = grid * cell;
  std::vector<uint8_t> px(static_cast<size_t>(W) * W * 3);
  for (int y = 0; y < W; ++y)
    for (int x = 0; x < W; ++x) {
      const size_t t = static_cast<size_t>(y / cell) * grid + x / cell;
      const int d = depth[t];
      uint8_t rgb[3] = {30, 30, 30};  // target-sampled
      if (d > 0 && t < vertical.size() && vertical[t] > 0) {
        rgb[0] = 230;  // a vertical head's cached proposal (Hawk): magenta
        rgb[1] = 40;
        rgb[2] = 200;
      } else if (d > 0) {
        // Accepted: yellow (depth 1) to deep blue (deepest), so long accepted runs stand out.
        const float t = max_depth > 1 ? static_cast<float>(d - 1) / (max_depth - 1) : 0.0f;
        rgb[0] = static_cast<uint8_t>(250 * (1 - t) + 40 * t);
        rgb[1] = static_cast<uint8_t>(220 * (1 - t) + 90 * t);
        rgb[2] = static_cast<uint8_t>(60 * (1 - t) + 230 * t);
      }
      std::copy_n(rgb, 3, px.data() + (static_cast<size_t>(y) * W + x) * 3);
    }
  write_png(path, px.data(), W, W, {{"parameters", description}, {"Software", "tessera"}});
}

}  // namespace tessera::cli
