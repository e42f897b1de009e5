#include "tessera/tuning.h"

#include <algorithm>
#include <cmath>

namespace tessera {

std::vector<bool> pareto_front(std::span<const TunePoint> points) {
  std::vector<bool> front(points.size(), true);
  for (size_t i = 0; i < points.size(); ++i)
    for (size_t j = 0; j < points.size() && front[i]; ++j) {
      const TunePoint &a = points[i], &b = points[j];
      const bool dominates =
          b.speedup >= a.speedup && b.top1 >= a.top1 && (b.speedup > a.speedup || b.top1 > a.top1);
      if (dominates) front[i] = false;
    }
  return front;
}

bool within_tolerance(const TunePoint& p, double vanilla_top1, double frechet_floor,
                      const QualityTolerance& t) {
  // A relative slack of 1e-12 so that a point exactly at the bound counts as within it. A floor
  // below 0 is the rounding of a zero distance (vanilla's images on other seeds the same, as under
  // greedy decoding): the bound is then 0, which a point with the same images meets.
  const double top1_min = vanilla_top1 - t.top1_drop_points / 100.0;
  const double fd_max = (1.0 + t.frechet_over_floor) * std::max(frechet_floor, 0.0);
  return p.top1 >= top1_min - 1e-12 && p.frechet <= fd_max * (1.0 + 1e-12);
}

int fastest_within_tolerance(std::span<const TunePoint> points, double vanilla_top1,
                             double frechet_floor, const QualityTolerance& t) {
  int best = -1;
  for (size_t i = 0; i < points.size(); ++i)
    if (within_tolerance(points[i], vanilla_top1, frechet_floor, t) &&
        (best < 0 || points[i].speedup > points[best].speedup))
      best = static_cast<int>(i);
  return best;
}

ToleranceResolution tolerance_resolution(const RecordedInterval& top1,
                                         const RecordedInterval& frechet, int images,
                                         double frechet_floor, const QualityTolerance& t) {
  ToleranceResolution r;
  r.top1_reach = std::max(top1.value - top1.lo, top1.hi - top1.value);
  r.frechet_reach = std::max(frechet.value - frechet.lo, frechet.hi - frechet.value);
  r.top1_allowed = t.top1_drop_points / 100.0;
  r.frechet_allowed = t.frechet_over_floor * std::max(frechet_floor, 0.0);
  // How many times more images each needs: (reach / allowed)^2; a zero allowance is never met.
  auto factor = [](double reach, double allowed) {
    if (reach <= allowed * (1.0 + 1e-12)) return 1.0;
    return allowed > 0.0 ? (reach / allowed) * (reach / allowed) : HUGE_VAL;
  };
  const double f =
      std::max(factor(r.top1_reach, r.top1_allowed), factor(r.frechet_reach, r.frechet_allowed));
  r.resolved = f <= 1.0;
  const double need = std::ceil(f * std::max(images, 1));
  r.images_needed = need >= 1e9 ? 1000000000 : static_cast<int>(need);
  return r;
}

}  // namespace tessera
