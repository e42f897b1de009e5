#include "image_output.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <span>

#include "tessera/error.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace fs = std::filesystem;

std::string numbered(const std::string& path, size_t i, size_t n) {
  if (n == 1) return path;
  fs::path p(path);
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%04zu", i);
  return (p.parent_path() / (p.stem().string() + buf + p.extension().string())).string();
}

namespace {
// "none", "a, b, c" or, for many, "a .. z (26 files)": the error stays one readable line.
std::string written_list(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  if (names.size() > 8)
    return names.front() + " .. " + names.back() + " (" + std::to_string(names.size()) + " files)";
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Tiles n images [n, s, s, 3] into a grid with `cols` columns and 2 px black padding
// (torchvision.utils.save_image style).
std::vector<uint8_t> tile(const std::vector<uint8_t>& px, int n, int s, int cols, int& W, int& H) {
  const int rows = (n + cols - 1) / cols, pad = 2;
  W = cols * (s + pad) + pad;
  H = rows * (s + pad) + pad;
  std::vector<uint8_t> out(static_cast<size_t>(W) * H * 3, 0);
  for (int i = 0; i < n; ++i) {
    const int ox = pad + (i % cols) * (s + pad), oy = pad + (i / cols) * (s + pad);
    for (int y = 0; y < s; ++y)
      std::copy_n(px.data() + ((static_cast<size_t>(i) * s + y) * s) * 3, s * 3,
                  out.data() + ((static_cast<size_t>(oy + y) * W + ox) * 3));
  }
  return out;
}
}  // namespace

void write_numbered(const std::string& path, int n,
                    const std::function<void(int i, const std::string& name)>& write) {
  std::vector<std::string> written;
  for (int i = 0; i < n; ++i) {
    const std::string name = numbered(path, i, n);
    try {
      write(i, name);
    } catch (const Error& e) {
      if (n == 1) throw;
      throw Error(std::string(e.what()) + " (written: " + written_list(written) + ")");
    }
    written.push_back(name);
    log_info("wrote " + name);
  }
}

DecodeImages decode_tokens(Pipeline& pipe, const std::vector<int32_t>& tokens) {
  const size_t per = static_cast<size_t>(pipe.config().gpt.grid) * pipe.config().gpt.grid;
  return [&pipe, &tokens, per](int first, int count) {
    return pipe.decode(std::span<const int32_t>(tokens).subspan(first * per, count * per), count);
  };
}

DecodeImages decode_latents(Pipeline& pipe, const std::vector<float>& latents) {
  const MarConfig& c = pipe.config().mar;
  const size_t per = static_cast<size_t>(c.seq_len()) * c.token_dim();
  return [&pipe, &latents, per](int first, int count) {
    return pipe.decode_latents(std::span<const float>(latents).subspan(first * per, count * per),
                               count);
  };
}

void write_pngs(const DecodeImages& decode, int n, int s, const std::string& out, bool grid,
                const std::vector<std::string>& params) {
  const size_t image_bytes = static_cast<size_t>(s) * s * 3;
  if (grid) {
    int W, H;
    const int cols = std::min(n, 8);
    std::string all;
    for (const auto& p : params) all += p + "\n";
    const std::vector<uint8_t> sheet = tile(decode(0, n), n, s, cols, W, H);
    write_png(out, sheet.data(), W, H, {{"parameters", all}});
    log_info("wrote " + out);
    return;
  }
  constexpr int kChunk = 8;  // images decoded at a time
  std::vector<uint8_t> px;
  int first = 0;
  write_numbered(out, n, [&](int i, const std::string& path) {
    if (px.empty() || i >= first + kChunk) {
      first = i;
      px = decode(first, std::min(kChunk, n - first));
    }
    write_png(path, px.data() + static_cast<size_t>(i - first) * image_bytes, s, s,
              {{"parameters", params[i]}, {"Software", "tessera"}});
  });
}

}  // namespace tessera::cli
