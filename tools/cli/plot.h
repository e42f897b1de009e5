// The PNG of `tessera tune --plot`: top-1 against speed-up for every point of a sweep, the Pareto
// front joined, the top-1 intervals as bars and the tolerance as a shaded band. A small raster
// plot: lines and disks drawn here, text by FreeType in DejaVu Sans, the file by write_png.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

struct TunePlot {
  struct Point {
    double speedup = 0.0, top1 = 0.0, top1_lo = 0.0, top1_hi = 0.0;  // top-1 as fractions
    bool front = false, within = false;
  };
  std::string title;
  std::vector<Point> points;
  double vanilla_top1 = 0.0;  // at speed-up 1
  double top1_floor = 0.0;    // the tolerance's lowest top-1
};

// Throws an Error naming the file (or the missing font) when it cannot be written.
void write_tune_plot(const std::string& path, const TunePlot& plot);

}  // namespace tessera::cli
