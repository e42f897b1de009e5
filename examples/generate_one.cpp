// A program linked against an installed libtessera: one image of a class-conditional model,
// sampled with the model's own settings (nothing set: config.json "sampling", as `tessera
// generate` does), written as a PNG, and its token grid as .npy (the same tokens `tessera generate
// -m MODEL --class N -s SEED --tokens-out` writes).
//
//   generate_one MODEL_DIR CLASS SEED OUT.png [TOKENS.npy]
//
// Built in CI against the installed prefix, with CMake (find_package(tessera), CMakeLists.txt here)
// and with pkg-config (scripts/check-install.sh).
#include <cstdio>
#include <exception>
#include <string>

#include "tessera/image_io.h"
#include "tessera/tessera.h"

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL_DIR CLASS SEED OUT.png [TOKENS.npy]\n", argv[0]);
    return 2;
  }
  try {
    auto pipe = tessera::Pipeline::load(argv[1]);
    tessera::GenerateOptions o;  // sampling left to the model
    o.seed = std::stoull(argv[3]);
    const std::vector<tessera::Condition> conds = {tessera::Condition::label(std::stoi(argv[2]))};
    const std::vector<std::vector<int32_t>> grids = pipe->generate(conds, o);
    const int size = pipe->image_size(), grid = pipe->config().gpt.grid;
    const std::vector<uint8_t> rgb = pipe->decode(grids[0], 1);
    tessera::write_png(argv[4], rgb.data(), size, size, {{"Software", "tessera generate_one"}});
    if (argc == 6) tessera::write_npy(argv[5], {1, grid, grid}, grids[0]);
    std::printf("cfg %g (the model's), wrote %s\n", pipe->default_sampling().cfg_scale, argv[4]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
