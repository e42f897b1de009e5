// Writing generated images: one file per image (numbered _0000.. when several, or named by a
// printf-style %d pattern) or one grid sheet, each with its generation parameters in the file
// (PNG "parameters" text chunk, JPEG comment). The format follows the name's extension: .png
// (or none), .jpg/.jpeg (libjpeg-turbo) or .webp (libwebp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::cli {

// The name of output i of n, numbered from `first` (--output-begin-idx): a path with a printf-style
// integer conversion ("img_%03d.png", "%d.jpg") is formatted with first + i, for any n; otherwise
// path_0000.png style names when n > 1, the path itself when n == 1. Throws an Error for any other
// conversion ("%s") or more than one.
std::string numbered(const std::string& path, size_t i, size_t n, size_t first = 0);

// Throws an Error naming the extension when `path` is not a format write_image knows.
void check_image_format(const std::string& path);

// Writes RGB pixels in the format of path's extension, with `parameters` stored in the file
// (PNG text chunk "parameters", JPEG comment; WebP files carry none).
void write_image(const std::string& path, const uint8_t* rgb, int width, int height,
                 const std::string& parameters);

// Writes the n files numbered(path, i, n) in order with write(i, name), logging each. When one
// fails, the error says which were written before it, e.g. "cannot write out_0003.png: No space
// left on device (written: out_0000.png, out_0001.png, out_0002.png)". Those stay: each is a
// complete file (the writes are atomic), so they are kept rather than deleted, and the message
// says exactly which ones a retry may skip.
// count <= n: a run interrupted after `count` of its n images writes those under the names they
// have in the whole run.
void write_numbered(const std::string& path, int count, int n, size_t first,
                    const std::function<void(int i, const std::string& name)>& write);
inline void write_numbered(const std::string& path, int n,
                           const std::function<void(int i, const std::string& name)>& write) {
  write_numbered(path, n, n, 0, write);
}

// Decodes images [first, first + count) to RGB pixels [count, size, size, 3].
using DecodeImages = std::function<std::vector<uint8_t>(int first, int count)>;

// Chunk decoders over a model's token grids / MAR latents (all images, row-major); they keep
// references to `pipe` and the data.
DecodeImages decode_tokens(Pipeline& pipe, const std::vector<int32_t>& tokens);
DecodeImages decode_latents(Pipeline& pipe, const std::vector<float>& latents);

// The "parameters" tessera stored in an image it wrote, whatever its format: a PNG's text chunk,
// a JPEG's comment, a WebP's XMP packet (recognised by their bytes, not the name). "" when the
// image holds none; an Error for a file that is none of the three or is malformed.
std::string read_image_parameters(const std::string& path);

// A run's images written as they finish (generate's on_image): each into its numbered file at
// once, so that a run stopped later (a second Ctrl-C, a crash) keeps every finished image; or,
// with --grid, into one sheet of the images so far, rewritten whole (atomically) at most once a
// second while the run lasts and once more by finish(). A failed write says which files were
// written before it, as write_numbered does.
class ImageWriter {
 public:
  // out: -o; total, first: the names' numbering (the run's -n and --output-begin-idx).
  ImageWriter(std::string out, bool grid, int total, size_t first, int size);
  // Image i of the run: RGB pixels [size, size, 3] and its "parameters". In order of i.
  void add(int i, const std::vector<uint8_t>& rgb, const std::string& parameters);
  // Writes the sheet of every image added (--grid); nothing otherwise.
  void finish();

 private:
  void write_sheet();
  std::string out_;
  bool grid_;
  int total_, size_;
  size_t first_;
  std::vector<std::string> written_;
  std::vector<uint8_t> sheet_pixels_;  // --grid: every image so far
  std::vector<std::string> sheet_params_;
  double last_sheet_ = 0.0;
};

// Writes n images, decoding them a few at a time so that a long run holds only a chunk's pixels
// (a --grid sheet needs them all). params[i] goes into image i's "parameters" text chunk. total,
// first: the names' numbering, as write_numbered's n and first (total 0: n).
void write_pngs(const DecodeImages& decode, int n, int size, const std::string& out, bool grid,
                const std::vector<std::string>& params, int total = 0, size_t first = 0);

}  // namespace tessera::cli
