#include "bench_common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "tessera/error.h"

namespace tessera::cli {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

nlohmann::json run_reference_bench(const std::string& cmd, const std::string& what,
                                   const std::string& shown) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) throw Error("cannot run " + shown);
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, p)) out += buf;
  const int rc = pclose(p);
  const auto pos = out.rfind("{\"impl\"");
  if (rc != 0 || pos == std::string::npos) throw Error("the " + what + " failed (" + shown + ")");
  return nlohmann::json::parse(out.substr(pos, out.find('\n', pos) - pos));
}

}  // namespace tessera::cli
