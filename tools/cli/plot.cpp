#include "plot.h"

#include <ft2build.h>
#include FT_FREETYPE_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>

#include "tessera/error.h"
#include "tessera/image_io.h"
#include "text_format.h"

namespace tessera::cli {

namespace {

struct Rgb {
  uint8_t r, g, b;
};

// Where Debian's fonts-dejavu-core puts the font (and other common layouts).
std::string find_font() {
  for (const char* p :
       {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "/usr/share/fonts/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/TTF/DejaVuSans.ttf"})
    if (std::filesystem::is_regular_file(p)) return p;
  throw Error("--plot needs the DejaVu Sans font (Debian: fonts-dejavu-core); it was not found");
}

class Canvas {
 public:
  Canvas(int w, int h) : w_(w), h_(h), px_(static_cast<size_t>(w) * h * 3, 255) {
    if (FT_Init_FreeType(&ft_) != 0) throw Error("--plot: cannot start FreeType");
    const std::string font = find_font();
    if (FT_New_Face(ft_, font.c_str(), 0, &face_) != 0) {
      FT_Done_FreeType(ft_);
      throw Error("--plot: cannot read the font " + font);
    }
  }
  ~Canvas() {
    FT_Done_Face(face_);
    FT_Done_FreeType(ft_);
  }
  Canvas(const Canvas&) = delete;
  Canvas& operator=(const Canvas&) = delete;

  // Mixes colour c into pixel (x, y) with weight a in [0, 1].
  void blend(int x, int y, Rgb c, double a) {
    if (x < 0 || y < 0 || x >= w_ || y >= h_ || a <= 0) return;
    a = std::min(a, 1.0);
    uint8_t* p = &px_[(static_cast<size_t>(y) * w_ + x) * 3];
    const uint8_t src[3] = {c.r, c.g, c.b};
    for (int k = 0; k < 3; ++k)
      p[k] = static_cast<uint8_t>(std::lround(p[k] * (1 - a) + src[k] * a));
  }
  void fill(int x0, int y0, int x1, int y1, Rgb c, double a = 1.0) {
    for (int y = std::min(y0, y1); y <= std::max(y0, y1); ++y)
      for (int x = std::min(x0, x1); x <= std::max(x0, x1); ++x) blend(x, y, c, a);
  }
  // A disk of radius r, its edge antialiased.
  void disk(double cx, double cy, double r, Rgb c) {
    for (int y = static_cast<int>(cy - r - 1); y <= static_cast<int>(cy + r + 1); ++y)
      for (int x = static_cast<int>(cx - r - 1); x <= static_cast<int>(cx + r + 1); ++x)
        blend(x, y, c, std::clamp(r + 0.5 - std::hypot(x - cx, y - cy), 0.0, 1.0));
  }
  // A line of width `width`, drawn as disks every half pixel; dash > 0: dashes of that length.
  void line(double x0, double y0, double x1, double y1, Rgb c, double width, double dash = 0) {
    const double len = std::hypot(x1 - x0, y1 - y0);
    const int steps = std::max(1, static_cast<int>(len * 2));
    for (int i = 0; i <= steps; ++i) {
      const double t = static_cast<double>(i) / steps;
      if (dash > 0 && std::fmod(t * len, 2 * dash) > dash) continue;
      disk(x0 + t * (x1 - x0), y0 + t * (y1 - y0), width / 2, c);
    }
  }
  // Text of pixel height `size` with its baseline at y; align 0 left, 0.5 centre, 1 right of x.
  void text(const std::string& s, double x, double y, int size, Rgb c, double align = 0.0) {
    FT_Set_Pixel_Sizes(face_, 0, size);
    double pen = x - align * width_of(s);
    for (const unsigned char ch : s) {
      if (FT_Load_Char(face_, ch, FT_LOAD_RENDER) != 0) continue;
      const FT_GlyphSlot g = face_->glyph;
      const int left = static_cast<int>(std::lround(pen)) + g->bitmap_left;
      const int top = static_cast<int>(std::lround(y)) - g->bitmap_top;
      for (unsigned r = 0; r < g->bitmap.rows; ++r)
        for (unsigned col = 0; col < g->bitmap.width; ++col)
          blend(left + static_cast<int>(col), top + static_cast<int>(r), c,
                g->bitmap.buffer[r * g->bitmap.pitch + col] / 255.0);
      pen += g->advance.x / 64.0;
    }
  }
  double width_of(const std::string& s) {
    double w = 0;
    for (const unsigned char ch : s)
      if (FT_Load_Char(face_, ch, FT_LOAD_DEFAULT) == 0) w += face_->glyph->advance.x / 64.0;
    return w;
  }
  void save(const std::string& path) { write_png(path, px_.data(), w_, h_); }

 private:
  int w_, h_;
  std::vector<uint8_t> px_;
  FT_Library ft_ = nullptr;
  FT_Face face_ = nullptr;
};

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  const double raw = (hi - lo) / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> t;
  for (double v = std::ceil(lo / step) * step; v <= hi + 1e-9 * step; v += step) t.push_back(v);
  return t;
}

}  // namespace

void write_tune_plot(const std::string& path, const TunePlot& p) {
  constexpr int W = 1000, H = 600, L = 90, R = 240, T = 60, B = 70;  // legend at the right
  const Rgb ink{40, 40, 40}, grid{225, 225, 225}, band{210, 240, 210}, front{200, 60, 30},
      within{30, 130, 60}, outside{120, 120, 120}, vanilla{40, 80, 200};
  double x0 = 1.0, x1 = 1.0, y0 = std::min(p.vanilla_top1, p.top1_floor), y1 = p.vanilla_top1;
  for (const auto& q : p.points) {
    x0 = std::min(x0, q.speedup);
    x1 = std::max(x1, q.speedup);
    y0 = std::min(y0, q.top1_lo);
    y1 = std::max(y1, q.top1_hi);
  }
  const double xpad = std::max(0.05, 0.08 * (x1 - x0)), ypad = std::max(0.02, 0.08 * (y1 - y0));
  x0 -= xpad;
  x1 += xpad;
  y0 = std::max(0.0, y0 - ypad);
  y1 = std::min(1.0, y1 + ypad);
  auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };

  Canvas c(W, H);
  // The tolerance band: top-1 from the tolerance's floor up.
  c.fill(L, static_cast<int>(py(std::min(y1, std::max(y0, p.top1_floor)))), W - R, T, band);
  for (double t : ticks(x0, x1)) {
    c.line(px(t), T, px(t), H - B, grid, 1);
    c.text(fmt(t, 2) + "x", px(t), H - B + 22, 14, ink, 0.5);
  }
  for (double t : ticks(100 * y0, 100 * y1)) {
    c.line(L, py(t / 100), W - R, py(t / 100), grid, 1);
    c.text(fmt(t, 0), L - 8, py(t / 100) + 5, 14, ink, 1.0);
  }
  c.line(L, T, L, H - B, ink, 1.5);
  c.line(L, H - B, W - R, H - B, ink, 1.5);
  // Vanilla: speed-up 1 at its top-1.
  c.line(px(1.0), T, px(1.0), H - B, vanilla, 1, 5);
  c.line(L, py(p.vanilla_top1), W - R, py(p.vanilla_top1), vanilla, 1, 5);
  c.disk(px(1.0), py(p.vanilla_top1), 6, vanilla);
  // The front, joined in order of speed-up.
  std::vector<TunePlot::Point> f;
  for (const auto& q : p.points)
    if (q.front) f.push_back(q);
  std::sort(f.begin(), f.end(), [](const auto& a, const auto& b) { return a.speedup < b.speedup; });
  for (size_t i = 1; i < f.size(); ++i)
    c.line(px(f[i - 1].speedup), py(f[i - 1].top1), px(f[i].speedup), py(f[i].top1), front, 2.5);
  for (const auto& q : p.points) {
    const Rgb col = q.within ? within : outside;
    c.line(px(q.speedup), py(q.top1_lo), px(q.speedup), py(q.top1_hi), col, 1.2);
    if (q.front) c.disk(px(q.speedup), py(q.top1), 7, front);
    c.disk(px(q.speedup), py(q.top1), 5, col);
  }
  c.text(p.title, (L + W - R) / 2.0, 28, 18, ink, 0.5);
  c.text("speed-up over vanilla (same classes and seeds)", (L + W - R) / 2.0, H - 20, 16, ink, 0.5);
  c.text("top-1 accuracy (%)", 12, T - 14, 16, ink, 0.0);
  // Legend, right of the plot area (it never hides a point).
  const double lx = W - R + 24, ly = T + 20;
  c.disk(lx, ly - 5, 5, within);
  c.text("within tolerance", lx + 14, ly, 14, ink);
  c.disk(lx, ly + 17, 5, outside);
  c.text("outside tolerance", lx + 14, ly + 22, 14, ink);
  c.line(lx - 6, ly + 39, lx + 6, ly + 39, front, 2.5);
  c.text("Pareto front", lx + 14, ly + 44, 14, ink);
  c.disk(lx, ly + 61, 5, vanilla);
  c.text("vanilla", lx + 14, ly + 66, 14, ink);
  c.fill(static_cast<int>(lx) - 6, static_cast<int>(ly) + 79, static_cast<int>(lx) + 6,
         static_cast<int>(ly) + 89, band);
  c.text("tolerance band", lx + 14, ly + 88, 14, ink);
  c.save(path);
}

}  // namespace tessera::cli
