#include "stats_json.h"

#include <algorithm>

namespace tessera::cli {

namespace {
// Hawk: the share of accepted drafts that were vertical proposals, overall and per column of the
// (square) token grid; null without vertical proposals.
nlohmann::json vertical_shares(const std::vector<const ImageStats*>& images) {
  int64_t drafts = 0, vertical = 0;
  std::vector<int64_t> col_drafts, col_vertical;
  bool any = false;
  for (const ImageStats* s : images) {
    const size_t n = s->accepted_depth.size();
    size_t w = 1;
    while (w * w < n) ++w;
    if (w * w != n) w = n;  // not a square grid: one row
    col_drafts.resize(std::max(col_drafts.size(), w), 0);
    col_vertical.resize(col_drafts.size(), 0);
    any = any || !s->accepted_vertical.empty();
    for (size_t t = 0; t < n; ++t) {
      if (s->accepted_depth[t] == 0) continue;
      const bool v = t < s->accepted_vertical.size() && s->accepted_vertical[t] > 0;
      ++drafts;
      ++col_drafts[t % w];
      vertical += v;
      col_vertical[t % w] += v;
    }
  }
  if (!any) return nullptr;
  std::vector<double> by_col;
  for (size_t c = 0; c < col_drafts.size(); ++c)
    by_col.push_back(col_drafts[c] ? static_cast<double>(col_vertical[c]) / col_drafts[c] : 0.0);
  return {{"accepted_drafts", drafts},
          {"vertical", vertical},
          {"share", drafts ? static_cast<double>(vertical) / drafts : 0.0},
          {"share_by_column", by_col}};
}
}  // namespace

nlohmann::json image_stats_json(const ImageStats& s) {
  nlohmann::json j = {{"tokens", s.tokens},
                      {"rounds", s.rounds},
                      {"target_forwards", s.target_forwards},
                      {"draft_forwards", s.draft_forwards},
                      {"mean_accepted_length", s.mean_accepted_length()},
                      {"proposed_by_depth", s.proposed},
                      {"accepted_by_depth", s.accepted},
                      {"acceptance_by_depth", s.acceptance_by_depth()},
                      {"rounds_by_draft_depth", s.rounds_by_depth},
                      {"draft_nodes", s.draft_nodes}};
  if (!s.accepted_vertical.empty()) j["vertical_proposals_accepted"] = vertical_shares({&s});
  return j;
}

nlohmann::json stats_json(const GenerateStats& st, const std::string& method) {
  nlohmann::json per = nlohmann::json::array();
  std::vector<const ImageStats*> images;
  for (const auto& s : st.per_image) {
    per.push_back(image_stats_json(s));
    images.push_back(&s);
  }
  const double img = std::max<int64_t>(st.images, 1);
  nlohmann::json j = {
      {"method", method},
      {"images", st.images},
      {"tokens", st.tokens},
      {"seconds", st.seconds},
      {"seconds_per_image", st.seconds / img},
      {"tokens_per_s", st.tokens / std::max(st.seconds, 1e-9)},
      {"mean_accepted_length", st.mean_accepted_length()},
      {"target_forwards_per_image", st.target_forwards() / img},
      {"batched_target_forwards", st.forward_passes},
      {"batched_draft_forwards", st.draft_forward_passes},
      {"device_loop_steps", st.device_steps},
      {"replayed_steps", st.replayed_steps},
      {"device_rounds", st.device_rounds},
      {"device_drafted_rounds", st.device_drafted_rounds},
      {"replayed_draft_rounds", st.replayed_draft_rounds},
      {"replayed_verify_rounds", st.replayed_verify_rounds},
      {"burst_rounds", st.burst_rounds},
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
  if (!st.tree.empty()) j["tree"] = st.tree;  // the draft tree verified ("": chains)
  // --draft-len auto: the costs each round's length was chosen from (given back, they repeat it).
  if (!st.draft_costs.verify.empty())
    j["draft_costs"] = {{"draft_step", st.draft_costs.draft_step},
                        {"verify", st.draft_costs.verify}};
  if (st.draft_hold > 0) j["draft_hold"] = st.draft_hold;  // and the rounds a choice was held for
  // Hawk: where its vertical proposals were accepted (Hawk §5.2's claim: in detailed regions).
  if (nlohmann::json v = vertical_shares(images); !v.is_null())
    j["vertical_proposals_accepted"] = v;
  return j;
}

nlohmann::json mar_stats_json(const MarStats& st, const std::string& method) {
  const double img = std::max<int64_t>(st.images, 1);
  return {{"method", method},
          {"images", st.images},
          {"tokens", st.tokens},
          {"steps", st.steps},
          {"seconds", st.seconds},
          {"seconds_per_image", st.seconds / img},
          {"tokens_per_s", st.tokens / std::max(st.seconds, 1e-9)},
          {"target_forwards", st.target_forwards},
          {"draft_forwards", st.draft_forwards},
          {"drafted", st.drafted},
          {"accepted", st.accepted},
          {"acceptance_rate", st.acceptance_rate()},
          {"resample_tries", st.resample_tries},
          {"fallbacks", st.fallbacks},
          {"head_rows_target", st.head_rows_target},
          {"head_rows_draft", st.head_rows_draft},
          {"device_steps", st.device_steps},
          {"time_split_s",
           {{"target_transformer", st.target_transformer_seconds},
            {"target_head", st.target_head_seconds},
            {"draft", st.draft_seconds},
            {"verify", st.verify_seconds}}}};
}

}  // namespace tessera::cli
