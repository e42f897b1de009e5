// LANTERN's latent neighbour table (LANTERN (Jang et al., 2025) §4.2; jadohu/LANTERN's
// entrypoints/generate_codebook.py): exact pairwise distances between raw VQ codebook vectors, the
// k_max nearest other codes per code, cached on disk per codebook checksum.
#include "speculative/latent_neighbours.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "common/log.h"
#include "common/thread_pool.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "tensor/dtype.h"
#include "tessera/error.h"

namespace tessera::speculative {
namespace fs = std::filesystem;

namespace {

uint64_t fnv1a64(const void* data, size_t n) {
  const auto* b = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ull;
  }
  return h;
}

// model_dir when writable, else $XDG_CACHE_HOME/tessera or ~/.cache/tessera; empty = no cache.
fs::path cache_dir(const std::string& model_dir) {
  if (access(model_dir.c_str(), W_OK) == 0) return model_dir;
  fs::path dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg)
    dir = fs::path(xdg) / "tessera";
  else if (const char* home = std::getenv("HOME"); home && *home)
    dir = fs::path(home) / ".cache" / "tessera";
  else
    return {};
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return {};
  return dir;
}

}  // namespace

LatentNeighbours LatentNeighbours::build(std::span<const float> codebook, int V, int dim, int k_max,
                                         LatentMetric metric) {
  check(V > 0 && dim > 0 && codebook.size() == static_cast<size_t>(V) * dim,
        "LatentNeighbours: codebook size " + std::to_string(codebook.size()) + " is not " +
            std::to_string(V) + " x " + std::to_string(dim));
  LatentNeighbours t;
  t.V_ = V;
  t.k_ = std::clamp(k_max, 0, V - 1);
  const int k = t.k_;
  t.table_.assign(static_cast<size_t>(V) * k, 0);
  if (k == 0) return t;

  // Transposed copy [dim, V] so the distances of one code to all others vectorise over codes;
  // the accumulation order over dims stays fixed, so distances (and tie-breaks) are deterministic.
  std::vector<double> cT(static_cast<size_t>(dim) * V);
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < dim; ++d)
      cT[static_cast<size_t>(d) * V + v] = codebook[static_cast<size_t>(v) * dim + d];
  std::vector<double> norm(V, 0.0);
  if (metric == LatentMetric::Cosine) {
    for (int d = 0; d < dim; ++d) {
      const double* row = cT.data() + static_cast<size_t>(d) * V;
      for (int v = 0; v < V; ++v) norm[v] += row[v] * row[v];
    }
    for (double& n : norm) n = std::sqrt(n);
  }

  // Rows handed out 16 at a time: nth_element's cost varies with the data.
  std::atomic<int> next{0};
  cpu_pool().run("latent_neighbours", [&](int, int) {
    std::vector<double> dist(V);
    std::vector<std::pair<double, int32_t>> order(V - 1);
    for (int i0; (i0 = next.fetch_add(16)) < V;)
      for (int i = i0; i < std::min(V, i0 + 16); ++i) {
        std::fill(dist.begin(), dist.end(), 0.0);
        for (int d = 0; d < dim; ++d) {
          const double a = codebook[static_cast<size_t>(i) * dim + d];
          const double* row = cT.data() + static_cast<size_t>(d) * V;
          if (metric == LatentMetric::L2) {
            for (int v = 0; v < V; ++v) dist[v] += (row[v] - a) * (row[v] - a);  // squared ℓ2
          } else {
            for (int v = 0; v < V; ++v) dist[v] += row[v] * a;  // dot product
          }
        }
        if (metric == LatentMetric::Cosine) {
          // 1 - cos; a zero vector has cos = 0 with everything.
          for (int v = 0; v < V; ++v) {
            const double nn = norm[i] * norm[v];
            dist[v] = 1.0 - (nn > 0.0 ? dist[v] / nn : 0.0);
          }
        }
        size_t m = 0;
        for (int v = 0; v < V; ++v)
          if (v != i) order[m++] = {dist[v], v};  // the code itself is excluded (diagonal = +inf)
        // (distance, index) pairs: ties broken by the smaller index.
        std::nth_element(order.begin(), order.begin() + (k - 1), order.end());
        std::sort(order.begin(), order.begin() + k);
        int32_t* out = t.table_.data() + static_cast<size_t>(i) * k;
        for (int j = 0; j < k; ++j) out[j] = order[j].second;
      }
  });
  return t;
}

LatentNeighbours LatentNeighbours::for_model(const std::string& model_dir, int k_max,
                                             LatentMetric metric) {
  const std::string vq_path = (fs::path(model_dir) / "vq.safetensors").string();
  if (!fs::exists(vq_path)) throw Error("LANTERN needs the VQ codebook: " + vq_path + " not found");
  const SafeTensorsFile file = SafeTensorsFile::open(vq_path);
  const std::string name = "quantize.embedding.weight";
  if (!file.has(name)) throw Error(vq_path + ": no tensor " + name + " (the VQ codebook)");
  const SafeTensorInfo& info = file.get(name);
  if (info.shape.size() != 2 || info.shape[0] < 1 || info.shape[1] < 1)
    throw Error(vq_path + ": " + name + " has shape " + shape_str(info.shape) +
                ", expected [codebook_size, embed_dim]");
  const int V = static_cast<int>(info.shape[0]);
  const int dim = static_cast<int>(info.shape[1]);
  const int k = std::clamp(k_max, 0, V - 1);

  // The cache key is the raw codebook bytes: a re-converted or fine-tuned codebook gets its own.
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(fnv1a64(info.data, info.nbytes)));
  const fs::path dir = cache_dir(model_dir);
  const std::string file_name = std::string("lantern_neighbours_") +
                                (metric == LatentMetric::L2 ? "l2" : "cos") + "_" + hex + ".npy";
  const fs::path cache = dir.empty() ? fs::path() : dir / file_name;

  if (!cache.empty() && fs::exists(cache)) {
    try {
      const NpyArray a = read_npy(cache.string());
      if (a.dtype == DType::I32 && a.shape.size() == 2 && a.shape[0] == V && a.shape[1] >= k &&
          a.shape[1] <= V - 1) {
        const std::vector<int32_t> all = a.as_i32();
        const int kc = static_cast<int>(a.shape[1]);
        LatentNeighbours t;
        t.V_ = V;
        t.k_ = k;
        t.table_.resize(static_cast<size_t>(V) * k);
        bool valid = true;
        // The ranking is a strict total order, so the first k columns of a wider table are
        // exactly the k-nearest table.
        for (int v = 0; v < V && valid; ++v)
          for (int j = 0; j < k; ++j) {
            const int32_t b = all[static_cast<size_t>(v) * kc + j];
            if (b < 0 || b >= V || b == v) {
              valid = false;
              break;
            }
            t.table_[static_cast<size_t>(v) * k + j] = b;
          }
        if (valid) return t;
      }
    } catch (const std::exception&) {
      // A corrupt or truncated cache file: rebuild below and overwrite it.
    }
  }

  LatentNeighbours t = build(file.read_f32(name), V, dim, k, metric);
  if (!cache.empty()) {
    // write_npy is atomic: a concurrent reader never sees a partial file, a failed write leaves
    // none, and the cache is only an optimisation, so a failure is logged, not thrown.
    try {
      write_npy(cache.string(), DType::I32, {V, k}, t.table_.data());
    } catch (const std::exception& e) {
      log_info("could not cache the LANTERN neighbour table at " + cache.string() + ": " +
               e.what());
    }
  }
  return t;
}

std::span<const int32_t> LatentNeighbours::nearest(int token, int k) const {
  if (token < 0 || token >= V_)  // (no check(): its message would be built on every call)
    throw Error("LatentNeighbours: token " + std::to_string(token) + " outside the codebook of " +
                std::to_string(V_));
  const int n = std::clamp(k, 0, k_);
  return {table_.data() + static_cast<size_t>(token) * k_, static_cast<size_t>(n)};
}

}  // namespace tessera::speculative
