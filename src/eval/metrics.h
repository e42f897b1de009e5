// The quality metrics' internals (the public functions are in tessera/quality.h): bootstrap
// resampling on counter-based streams and percentile intervals.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "tessera/quality.h"

namespace tessera {

// Bootstrap streams: which sample a resample index draws from.
enum class BootstrapStream : uint32_t { Images = 0, Reference = 1, Classes = 2 };

// Indices [0, n) drawn uniformly with replacement for resample b: a pure function of
// (seed, b, stream), so an interval never depends on thread count or on the other statistics.
std::vector<int> bootstrap_indices(uint64_t seed, int b, BootstrapStream stream, int n);

// The value of `stat` on the whole sample and the percentile interval of its values over
// opts.resamples resamples (stat(b) computes resample b; run in parallel, so it must be
// thread-safe). Resamples whose statistic is NaN are left out (a class-less resample).
// recentre: move the interval by the bootstrap's bias estimate (the resamples' mean minus
// `value`), for statistics that resampling with replacement inflates (the Frechet distance), and
// clamp it at 0 (such a statistic is a distance);
// *bias, when given, receives that estimate.
Interval percentile_bootstrap(double value, const std::function<double(int)>& stat,
                              const BootstrapOptions& opts, bool recentre = false,
                              double* bias = nullptr);

// Linear-interpolated percentile (numpy's default method) of sorted values, q in [0, 1].
double percentile_sorted(const std::vector<double>& sorted, double q);

// The standard normal quantile function.
double normal_quantile(double p);

// Throws an Error (prefixed by `what`) when a ScoredImages' arrays do not match its n.
void check_scored(const ScoredImages& s, const char* what);

// Rows idx of a row-major [*, dim] matrix (a bootstrap resample of feature vectors).
std::vector<float> gather_rows(const std::vector<float>& rows, const std::vector<int>& idx,
                               int dim);

}  // namespace tessera
