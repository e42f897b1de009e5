#include "stats_json.h"

#include <algorithm>

namespace tessera::cli {

namespace {
nlohmann::json image_stats_json(const ImageStats& s) {
  return {{"tokens", s.tokens},
          {"rounds", s.rounds},
          {"target_forwards", s.target_forwards},
          {"draft_forwards", s.draft_forwards},
          {"mean_accepted_length", s.mean_accepted_length()},
          {"proposed_by_depth", s.proposed},
          {"accepted_by_depth", s.accepted},
          {"acceptance_by_depth", s.acceptance_by_depth()},
          {"rounds_by_draft_depth", s.rounds_by_depth},
          {"draft_nodes", s.draft_nodes}};
}
}  // namespace

nlohmann::json stats_json(const GenerateStats& st, const std::string& method) {
  nlohmann::json per = nlohmann::json::array();
  for (const auto& s : st.per_image) per.push_back(image_stats_json(s));
  const double img = std::max<int64_t>(st.images, 1);
  return {{"method", method},
          {"images", st.images},
          {"tokens", st.tokens},
          {"seconds", st.seconds},
          {"seconds_per_image", st.seconds / img},
          {"tokens_per_s", st.tokens / std::max(st.seconds, 1e-9)},
          {"mean_accepted_length", st.mean_accepted_length()},
          {"target_forwards_per_image", st.target_forwards() / img},
          {"batched_target_forwards", st.forward_passes},
          {"batched_draft_forwards", st.draft_forward_passes},
          {"acceptance_by_depth", st.acceptance_by_depth()},
          {"rounds_by_draft_depth", st.rounds_by_depth()},
          {"mean_draft_depth", st.mean_draft_depth()},
          {"mean_draft_nodes", st.mean_draft_nodes()},
          {"time_split_s",
           {{"target", st.target_seconds},
            {"draft", st.draft_seconds},
            {"verify", st.verify_seconds},
            {"rules", st.rule_seconds}}},
          {"notes", st.notes},  // e.g. a lossy method outside the model's validated setting
          {"per_image", per}};
}

}  // namespace tessera::cli
