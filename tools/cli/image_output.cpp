#include "image_output.h"

#include <chrono>

#include <jpeglib.h>
#include <webp/encode.h>
#include <webp/mux.h>
#include <memory>

#include <algorithm>
#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <filesystem>
#include <span>

#include "tessera/error.h"
#include "tessera/file_io.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::cli {

namespace fs = std::filesystem;

namespace {

// The one integer conversion of a name pattern: its position, length and zero-padded width.
struct Conversion {
  size_t pos = std::string::npos, len = 0;
  int width = 0;
  bool zero = false;
};

// Parses "%d", "%4d", "%04d" (and "%%" as a literal %); anything else is an error, so that a
// user's name never reaches printf as a format.
Conversion find_conversion(const std::string& path) {
  Conversion c;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') continue;
    if (i + 1 < path.size() && path[i + 1] == '%') {
      ++i;
      continue;
    }
    size_t j = i + 1;
    const bool zero = j < path.size() && path[j] == '0';
    if (zero) ++j;
    int width = 0;
    while (j < path.size() && std::isdigit(static_cast<unsigned char>(path[j])) && width < 100)
      width = width * 10 + (path[j++] - '0');
    if (j >= path.size() || path[j] != 'd')
      throw Error("output name " + path +
                  ": only an integer conversion such as %d or %04d may follow '%' (%% for a "
                  "literal %)");
    if (c.pos != std::string::npos)
      throw Error("output name " + path + ": more than one %d conversion");
    c = {i, j + 1 - i, width, zero};
    i = j;
  }
  return c;
}

std::string unescape_percent(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '%' && i + 1 < s.size() && s[i + 1] == '%') ++i;
  }
  return out;
}

std::string lower_extension(const std::string& path) {
  std::string e = fs::path(path).extension().string();
  for (char& ch : e) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return e;
}

}  // namespace

std::string numbered(const std::string& path, size_t i, size_t n, size_t first) {
  const Conversion c = find_conversion(path);
  if (c.pos != std::string::npos) {
    std::string num = std::to_string(first + i);
    if (static_cast<int>(num.size()) < c.width)
      num.insert(0, c.width - num.size(), c.zero ? '0' : ' ');
    return unescape_percent(path.substr(0, c.pos)) + num +
           unescape_percent(path.substr(c.pos + c.len));
  }
  const std::string plain = unescape_percent(path);
  if (n == 1 && first == 0) return plain;
  fs::path p(plain);
  char buf[32];
  std::snprintf(buf, sizeof buf, "_%04zu", first + i);
  return (p.parent_path() / (p.stem().string() + buf + p.extension().string())).string();
}

void check_image_format(const std::string& path) {
  const std::string e = lower_extension(path);
  if (e.empty() || e == ".png" || e == ".jpg" || e == ".jpeg" || e == ".webp") return;
  throw Error("output " + path + ": unknown image format '" + e +
              "' (tessera writes .png, .jpg/.jpeg and .webp)");
}

namespace {

// libjpeg reports errors through a callback that must not return: jump back and throw.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
};

std::string encode_jpeg(const uint8_t* rgb, int w, int h, const std::string& comment) {
  jpeg_compress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = [](j_common_ptr c) {
    std::longjmp(reinterpret_cast<JpegError*>(c->err)->jump, 1);
  };
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    std::free(buf);
    throw Error("JPEG encoding failed");
  }
  jpeg_create_compress(&cinfo);
  jpeg_mem_dest(&cinfo, &buf, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);  // small images: keep the drawing's edges
  jpeg_start_compress(&cinfo, TRUE);
  // A COM marker holds at most 65533 bytes.
  if (!comment.empty())
    jpeg_write_marker(&cinfo, JPEG_COM, reinterpret_cast<const JOCTET*>(comment.data()),
                      static_cast<unsigned>(std::min<size_t>(comment.size(), 65533)));
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(rgb + static_cast<size_t>(cinfo.next_scanline) * w * 3);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

// The settings as an XMP packet (the metadata chunk WebP defines): one attribute,
// tessera:parameters, holding the same text as the PNG's "parameters" chunk, XML-escaped.
std::string xmp_packet(const std::string& parameters) {
  std::string v;
  for (char c : parameters) {
    switch (c) {
      case '&':
        v += "&amp;";
        break;
      case '<':
        v += "&lt;";
        break;
      case '>':
        v += "&gt;";
        break;
      case '"':
        v += "&quot;";
        break;
      case '\n':
        v += "&#10;";
        break;
      default:
        v += c;
    }
  }
  return "<x:xmpmeta xmlns:x=\"adobe:ns:meta/\"><rdf:RDF "
         "xmlns:rdf=\"http://www.w3.org/1999/02/22-rdf-syntax-ns#\"><rdf:Description "
         "xmlns:tessera=\"https://tessera.invalid/ns/1.0/\" tessera:parameters=\"" +
         v + "\"/></rdf:RDF></x:xmpmeta>";
}

std::string encode_webp(const uint8_t* rgb, int w, int h, const std::string& parameters) {
  uint8_t* buf = nullptr;
  const size_t size = WebPEncodeRGB(rgb, w, h, w * 3, 95.0f, &buf);
  if (size == 0) throw Error("WebP encoding failed");
  std::unique_ptr<uint8_t, void (*)(void*)> image(buf, WebPFree);
  if (parameters.empty()) return std::string(reinterpret_cast<const char*>(buf), size);
  // libwebpmux adds the XMP chunk (and the VP8X header that announces it).
  std::unique_ptr<WebPMux, void (*)(WebPMux*)> mux(WebPMuxNew(), WebPMuxDelete);
  if (!mux) throw Error("WebP encoding failed (out of memory)");
  const WebPData bitstream{buf, size};
  const std::string xmp = xmp_packet(parameters);
  const WebPData meta{reinterpret_cast<const uint8_t*>(xmp.data()), xmp.size()};
  WebPData assembled;
  WebPDataInit(&assembled);
  if (WebPMuxSetImage(mux.get(), &bitstream, 1) != WEBP_MUX_OK ||
      WebPMuxSetChunk(mux.get(), "XMP ", &meta, 1) != WEBP_MUX_OK ||
      WebPMuxAssemble(mux.get(), &assembled) != WEBP_MUX_OK)
    throw Error("WebP encoding failed (metadata)");
  std::string out(reinterpret_cast<const char*>(assembled.bytes), assembled.size);
  WebPDataClear(&assembled);
  return out;
}

}  // namespace

namespace {

// The text of the first COM marker before the scan data of a JPEG ("" when none).
std::string jpeg_comment(const std::string& b, const std::string& path) {
  auto bad = [&]() -> std::string {
    throw Error(path + ": malformed JPEG (a marker runs past the file)");
  };
  size_t i = 2;
  while (i + 4 <= b.size()) {
    if (static_cast<unsigned char>(b[i]) != 0xFF) bad();
    const unsigned char marker = static_cast<unsigned char>(b[i + 1]);
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    if (marker == 0xD8 || (marker >= 0xD0 && marker <= 0xD7) || marker == 0x01) {
      i += 2;  // no length
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) break;  // the scan: no more header markers
    const size_t len =
        (static_cast<unsigned char>(b[i + 2]) << 8) | static_cast<unsigned char>(b[i + 3]);
    if (len < 2 || i + 2 + len > b.size()) bad();
    if (marker == 0xFE) return b.substr(i + 4, len - 2);
    i += 2 + len;
  }
  return "";
}

// The tessera:parameters attribute of a WebP's XMP chunk, unescaped ("" when none).
std::string webp_parameters(const std::string& b, const std::string& path) {
  const WebPData data{reinterpret_cast<const uint8_t*>(b.data()), b.size()};
  std::unique_ptr<WebPMux, void (*)(WebPMux*)> mux(WebPMuxCreate(&data, 0), WebPMuxDelete);
  if (!mux) throw Error(path + ": malformed WebP file");
  WebPData xmp;
  if (WebPMuxGetChunk(mux.get(), "XMP ", &xmp) != WEBP_MUX_OK) return "";
  const std::string packet(reinterpret_cast<const char*>(xmp.bytes), xmp.size);
  const std::string key = "tessera:parameters=\"";
  const size_t at = packet.find(key);
  if (at == std::string::npos) return "";
  const size_t end = packet.find('"', at + key.size());
  if (end == std::string::npos) throw Error(path + ": malformed XMP packet (unterminated value)");
  std::string v;
  for (size_t i = at + key.size(); i < end; ++i) {
    if (packet[i] != '&') {
      v += packet[i];
      continue;
    }
    const size_t semi = packet.find(';', i);
    const std::string entity = semi == std::string::npos ? "" : packet.substr(i, semi - i + 1);
    if (entity == "&amp;")
      v += '&';
    else if (entity == "&lt;")
      v += '<';
    else if (entity == "&gt;")
      v += '>';
    else if (entity == "&quot;")
      v += '"';
    else if (entity == "&#10;")
      v += '\n';
    else
      throw Error(path + ": malformed XMP packet (entity " + entity.substr(0, 12) + ")");
    i = semi;
  }
  return v;
}

}  // namespace

std::string read_image_parameters(const std::string& path) {
  // The header is enough to tell the format; JPEG and WebP files are read whole (tessera's are
  // small), PNGs by the PNG reader.
  const std::string b = read_file(path, size_t{256} << 20);
  if (b.rfind("\x89PNG\r\n\x1a\n", 0) == 0) {
    int w = 0, h = 0;
    std::vector<std::pair<std::string, std::string>> text;
    read_png(path, w, h, &text);
    for (const auto& [k, v] : text)
      if (k == "parameters") return v;
    return "";
  }
  if (b.size() >= 4 && static_cast<unsigned char>(b[0]) == 0xFF &&
      static_cast<unsigned char>(b[1]) == 0xD8)
    return jpeg_comment(b, path);
  if (b.size() >= 12 && b.compare(0, 4, "RIFF") == 0 && b.compare(8, 4, "WEBP") == 0)
    return webp_parameters(b, path);
  throw Error(path + ": not a PNG, JPEG or WebP image");
}

void write_image(const std::string& path, const uint8_t* rgb, int width, int height,
                 const std::string& parameters) {
  check_image_format(path);
  const std::string e = lower_extension(path);
  if (e == ".jpg" || e == ".jpeg")
    write_file_atomic(path, encode_jpeg(rgb, width, height, parameters));
  else if (e == ".webp")
    write_file_atomic(path, encode_webp(rgb, width, height, parameters));
  else
    write_png(path, rgb, width, height, {{"parameters", parameters}, {"Software", "tessera"}});
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

void write_numbered(const std::string& path, int count, int n, size_t first,
                    const std::function<void(int i, const std::string& name)>& write) {
  std::vector<std::string> written;
  for (int i = 0; i < count; ++i) {
    const std::string name = numbered(path, i, n, first);
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

namespace {
double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ImageWriter::ImageWriter(std::string out, bool grid, int total, size_t first, int size)
    : out_(std::move(out)), grid_(grid), total_(total), size_(size), first_(first) {
  last_sheet_ = seconds_now();
}

void ImageWriter::add(int i, const std::vector<uint8_t>& rgb, const std::string& parameters) {
  if (grid_) {
    sheet_pixels_.insert(sheet_pixels_.end(), rgb.begin(), rgb.end());
    sheet_params_.push_back(parameters);
    // The sheet so far, now and then: a run stopped later still leaves one.
    if (seconds_now() - last_sheet_ >= 1.0) write_sheet();
    return;
  }
  const std::string name = numbered(out_, i, total_, first_);
  try {
    write_image(name, rgb.data(), size_, size_, parameters);
  } catch (const Error& e) {
    if (total_ == 1) throw;
    throw Error(std::string(e.what()) + " (written: " + written_list(written_) + ")");
  }
  written_.push_back(name);
  log_info("wrote " + name);
}

void ImageWriter::write_sheet() {
  const int n = static_cast<int>(sheet_params_.size());
  if (n == 0) return;
  int W, H;
  std::string all;
  for (const auto& p : sheet_params_) all += p + "\n";
  const std::vector<uint8_t> sheet = tile(sheet_pixels_, n, size_, std::min(n, 8), W, H);
  write_image(numbered(out_, 0, 1, first_), sheet.data(), W, H, all);
  last_sheet_ = seconds_now();
}

void ImageWriter::finish() {
  if (!grid_ || sheet_params_.empty()) return;
  write_sheet();
  log_info("wrote " + numbered(out_, 0, 1, first_));
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
                const std::vector<std::string>& params, int total, size_t first) {
  const size_t image_bytes = static_cast<size_t>(s) * s * 3;
  if (grid) {
    int W, H;
    const int cols = std::min(n, 8);
    std::string all;
    for (const auto& p : params) all += p + "\n";
    const std::vector<uint8_t> sheet = tile(decode(0, n), n, s, cols, W, H);
    const std::string name = numbered(out, 0, 1, first);
    write_image(name, sheet.data(), W, H, all);
    log_info("wrote " + name);
    return;
  }
  constexpr int kChunk = 8;  // images decoded at a time
  std::vector<uint8_t> px;
  int first_decoded = 0;
  write_numbered(out, n, std::max(total, n), first, [&](int i, const std::string& path) {
    if (px.empty() || i >= first_decoded + kChunk) {
      first_decoded = i;
      px = decode(first_decoded, std::min(kChunk, n - first_decoded));
    }
    write_image(path, px.data() + static_cast<size_t>(i - first_decoded) * image_bytes, s, s,
                params[i]);
  });
}

}  // namespace tessera::cli
