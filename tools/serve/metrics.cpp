#include "metrics.h"

#include <cstdio>

namespace tessera::serve {

void Metrics::observe(double s) {
  size_t b = 0;
  while (b < std::size(kBuckets) && s > kBuckets[b]) ++b;
  latency[b]++;
  latency_sum += s;
  latency_count++;
}

std::string Metrics::text(int64_t queued, int64_t in_flight, int64_t settings,
                          int64_t joined) const {
  std::string t;
  char buf[64];
  auto num = [&buf](double v) {
    std::snprintf(buf, sizeof buf, "%.6g", v);
    return std::string(buf);
  };
  auto metric = [&t](const std::string& name, const std::string& type, const std::string& help) {
    t += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto line = [&t](const std::string& s) { t += s + "\n"; };
  metric("tessera_requests_total", "counter", "HTTP requests answered, by status.");
  for (const auto& [code, n] : requests)
    line("tessera_requests_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(n));
  metric("tessera_disconnects_total", "counter",
         "Generation requests whose client went away before the answer; their images were "
         "cancelled.");
  line("tessera_disconnects_total " + std::to_string(disconnects));
  metric("tessera_engine_faults_total", "counter",
         "Faults of a setting's generation: its requests in flight were answered 500 and it was "
         "started again for the next ones.");
  line("tessera_engine_faults_total " + std::to_string(engine_faults));
  metric("tessera_queue_images", "gauge", "Images waiting for a slot in a batch.");
  line("tessera_queue_images " + std::to_string(queued));
  metric("tessera_in_flight_images", "gauge", "Images being generated.");
  line("tessera_in_flight_images " + std::to_string(in_flight));
  metric("tessera_settings", "gauge",
         "Distinct settings (method, parameters, sampling) with a batch of their own.");
  line("tessera_settings " + std::to_string(settings));
  metric("tessera_joined_settings", "gauge",
         "Settings whose requests share another's batch: their method drafts as its method does "
         "(only the acceptance rule differs).");
  line("tessera_joined_settings " + std::to_string(joined));
  metric("tessera_images_total", "counter", "Images generated.");
  line("tessera_images_total " + std::to_string(images));
  metric("tessera_tokens_total", "counter", "Image tokens generated (rate(): tokens/s).");
  line("tessera_tokens_total " + std::to_string(tokens));
  metric("tessera_mean_accepted_length", "gauge",
         "Tokens per target forward after an image's first, by method.");
  for (const auto& [method, a] : by_method)
    line("tessera_mean_accepted_length{method=\"" + method + "\"} " +
         num(a.rounds > 0 ? static_cast<double>(a.accepted) / a.rounds : 0.0));
  metric("tessera_request_seconds", "histogram", "Time from a generation request to its answer.");
  int64_t cum = 0;
  for (size_t b = 0; b <= std::size(kBuckets); ++b) {
    cum += latency[b];
    const std::string le = b < std::size(kBuckets) ? num(kBuckets[b]) : "+Inf";
    line("tessera_request_seconds_bucket{le=\"" + le + "\"} " + std::to_string(cum));
  }
  std::snprintf(buf, sizeof buf, "%.6f", latency_sum);
  line(std::string("tessera_request_seconds_sum ") + buf);
  line("tessera_request_seconds_count " + std::to_string(latency_count));
  return t;
}

}  // namespace tessera::serve
