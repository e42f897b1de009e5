// JSON of a generation's statistics (generate --stats-out, bench; the Python package's stats).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "tessera/mar.h"
#include "tessera/tessera.h"

namespace tessera::cli {

// Aggregates, the time split and one "per_image" entry per image.
// One image's: tokens, rounds, forwards, acceptance per draft depth.
nlohmann::json image_stats_json(const ImageStats& s);

nlohmann::json stats_json(const GenerateStats& st, const std::string& method);

// A MAR generation's (generate --stats-out, bench): counts, acceptance and the time split.
nlohmann::json mar_stats_json(const MarStats& st, const std::string& method);

}  // namespace tessera::cli
