// Acceptance heatmap over the token grid (as Continuous SD, App. D.4, Fig. 16): one cell per token,
// dark where the target sampled the token, coloured by the draft depth at which it was accepted
// otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tessera::cli {

// depth: [grid * grid] raster order, 0 = target-sampled, d >= 1 = accepted at draft depth d.
// vertical (Hawk, may be empty): per token, > 0 where the accepted draft was a vertical head's
// cached proposal; those cells are magenta.
void write_acceptance_heatmap(const std::string& path, const std::vector<uint8_t>& depth, int grid,
                              int max_depth, const std::string& description,
                              const std::vector<uint8_t>& vertical = {});

}  // namespace tessera::cli
