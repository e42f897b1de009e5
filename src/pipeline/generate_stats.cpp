// Aggregates of the public GenerateStats / ImageStats records.
#include <algorithm>

#include "tessera/tessera.h"

namespace tessera {

int64_t GenerateStats::rounds() const {
  int64_t r = 0;
  for (const auto& s : per_image) r += s.rounds;
  return r;
}
int64_t GenerateStats::target_forwards() const {
  int64_t r = 0;
  for (const auto& s : per_image) r += s.target_forwards;
  return r;
}
double GenerateStats::mean_accepted_length() const {
  const int64_t r = rounds();
  return r > 0 ? static_cast<double>(tokens - images) / r : 0.0;
}
std::vector<int64_t> GenerateStats::rounds_by_depth() const {
  std::vector<int64_t> all;
  for (const auto& s : per_image) {
    all.resize(std::max(all.size(), s.rounds_by_depth.size()), 0);
    for (size_t d = 0; d < s.rounds_by_depth.size(); ++d) all[d] += s.rounds_by_depth[d];
  }
  return all;
}
double GenerateStats::mean_draft_depth() const {
  const std::vector<int64_t> h = rounds_by_depth();
  double rounds = 0.0, drafted = 0.0;
  for (size_t d = 0; d < h.size(); ++d) {
    rounds += static_cast<double>(h[d]);
    drafted += static_cast<double>(d) * static_cast<double>(h[d]);
  }
  return rounds > 0 ? drafted / rounds : 0.0;
}
double GenerateStats::mean_draft_nodes() const {
  int64_t nodes = 0, r = 0;
  for (const auto& s : per_image) {
    nodes += s.draft_nodes;
    r += s.rounds;
  }
  return r > 0 ? static_cast<double>(nodes) / static_cast<double>(r) : 0.0;
}
std::vector<double> ImageStats::acceptance_by_depth() const {
  std::vector<double> out(proposed.size(), 0.0);
  for (size_t i = 0; i < proposed.size(); ++i)
    if (proposed[i] > 0)
      out[i] = static_cast<double>(i < accepted.size() ? accepted[i] : 0) / proposed[i];
  return out;
}
std::vector<double> GenerateStats::acceptance_by_depth() const {
  ImageStats all;  // the counts of every image, summed
  for (const auto& s : per_image) {
    all.proposed.resize(std::max(all.proposed.size(), s.proposed.size()), 0);
    all.accepted.resize(std::max(all.accepted.size(), s.accepted.size()), 0);
    for (size_t i = 0; i < s.proposed.size(); ++i) all.proposed[i] += s.proposed[i];
    for (size_t i = 0; i < s.accepted.size(); ++i) all.accepted[i] += s.accepted[i];
  }
  return all.acceptance_by_depth();
}

}  // namespace tessera
