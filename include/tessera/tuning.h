// Picking a relaxed method's setting from a sweep of its parameters (`tessera tune`,
// docs/quality.md): the speed-quality Pareto front and the model's quality tolerance.
#pragma once

#include <span>
#include <vector>

#include "tessera/config.h"

namespace tessera {

// One configuration of a sweep, measured against vanilla on the same classes and seeds.
struct TunePoint {
  double speedup = 0.0;  // vanilla's s/image over the point's
  double top1 = 0.0;     // top-1 accuracy, a fraction
  double frechet = 0.0;  // Frechet distance to vanilla's images
};

// For each point, whether it is on the Pareto front of (speed-up, top-1), both to be maximised:
// no other point is at least as fast and at least as accurate, and strictly better in one.
std::vector<bool> pareto_front(std::span<const TunePoint> points);

// The tolerance of docs/quality.md: top1 >= vanilla_top1 - t.top1_drop_points / 100 and
// frechet <= (1 + t.frechet_over_floor) * frechet_floor, where frechet_floor is the distance of
// vanilla on other seeds to vanilla at the same n (point values; the intervals are reported).
bool within_tolerance(const TunePoint& p, double vanilla_top1, double frechet_floor,
                      const QualityTolerance& t);

// Whether a point's intervals, measured on `images` images, are narrow enough to tell whether it
// is within the tolerance: the top-1 interval reaches at most t.top1_drop_points from its value,
// and the Frechet interval at most t.frechet_over_floor * frechet_floor. Otherwise a verdict of
// "within" is mostly noise (at -n 4 top-1's interval spans 75 points), and `tune --write`
// refuses to record it. images_needed: the n at which both would be narrow enough, from the
// intervals shrinking as 1/sqrt(n) (images itself when resolved).
struct ToleranceResolution {
  bool resolved = false;
  int images_needed = 0;
  double top1_reach = 0.0, top1_allowed = 0.0;        // fractions
  double frechet_reach = 0.0, frechet_allowed = 0.0;  // distances
};
ToleranceResolution tolerance_resolution(const RecordedInterval& top1,
                                         const RecordedInterval& frechet, int images,
                                         double frechet_floor, const QualityTolerance& t);

// The index of the fastest point within the tolerance (the first of equals), or -1 when none is.
int fastest_within_tolerance(std::span<const TunePoint> points, double vanilla_top1,
                             double frechet_floor, const QualityTolerance& t);

}  // namespace tessera
