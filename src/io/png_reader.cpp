#include "io/png_reader.h"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string_view>

#include "io/mapped_file.h"
#include "io/printable.h"
#include "tessera/error.h"
#include "tessera/image_io.h"

namespace tessera {

namespace {

// libpng reports an error by longjmp to the last setjmp. A longjmp that skips the destructor of a
// C++ object is undefined behaviour, so every libpng call that can fail runs inside one of the
// plain functions below: each sets the jump target itself and holds nothing with a destructor,
// and a longjmp only unwinds libpng's frames and the callbacks (plain too) back into it. The
// C++ caller checks their bool result.

// The input and libpng's last error message; trivially destructible.
struct PngSource {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[160];
};

void on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // e.g. "iCCP: known incorrect sRGB profile"

void on_read(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "truncated PNG data");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

// Sets the limits, reads the header and asks for 8-bit RGB rows; *passes: 1, or 7 (interlaced);
// *bits_per_pixel: as stored in the file.
bool read_header(png_structp png, png_infop info, int* passes, int* bits_per_pixel) {
  if (setjmp(png_jmpbuf(png))) return false;
  // Bounds checked by libpng while it reads IHDR, before it allocates anything for the image.
  png_set_user_limits(png, kMaxPngSide, kMaxPngSide);
  png_set_chunk_cache_max(png, 1000);              // ancillary chunks (tEXt, sPLT, ...) kept
  png_set_chunk_malloc_max(png, size_t{8} << 20);  // bytes per chunk, decompressed text included
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  // A fuzzer cannot forge checksums: let it past them to the code that reads the data.
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
#ifdef PNG_IGNORE_ADLER32
  png_set_option(png, PNG_IGNORE_ADLER32, PNG_OPTION_ON);
#endif
#endif
  png_read_info(png, info);
  *bits_per_pixel = png_get_bit_depth(png, info) * png_get_channels(png, info);
  png_set_expand(png);  // palette -> RGB, gray below 8 bits -> 8 bits, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  png_set_gray_to_rgb(png);
  *passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

// One row; for an interlaced image, one pass's pixels combined into the row.
bool read_row(png_structp png, png_bytep row) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_row(png, row, nullptr);
  return true;
}

// The chunks after the image data, up to IEND (text may follow IDAT).
bool read_end(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_end(png, info);
  return true;
}

// libpng allocates a chunk's declared length before it reads the chunk (and only warns about
// lengths above png_set_chunk_malloc_max): refuse a length the input cannot hold, so that a small
// file cannot make it allocate gigabytes.
void check_chunk_lengths(const uint8_t* data, size_t size, const std::string& where) {
  for (size_t pos = 8; pos + 8 <= size;) {
    const uint32_t length = (uint32_t{data[pos]} << 24) | (uint32_t{data[pos + 1]} << 16) |
                            (uint32_t{data[pos + 2]} << 8) | data[pos + 3];
    const std::string_view type(reinterpret_cast<const char*>(data + pos + 4), 4);
    if (size_t{length} + 12 > size - pos)
      throw Error(where + ": truncated PNG (chunk '" + printable(type) + "' at byte " +
                  std::to_string(pos) + " claims " + std::to_string(length) + " bytes, " +
                  std::to_string(size - pos) + " remain)");
    if (type == "IEND") return;
    pos += size_t{length} + 12;
  }
}

// Frees the read and info structs (png_destroy_read_struct never reports errors).
struct PngReadStruct {
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReadStruct() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

}  // namespace

std::vector<uint8_t> read_png_memory(const uint8_t* data, size_t size, const std::string& where,
                                     int& width, int& height,
                                     std::vector<std::pair<std::string, std::string>>* text) {
  PngSource src{data, size, 0, {}};
  const auto fail = [&](const char* what) {
    return Error(where + ": " + what +
                 (src.message[0] ? std::string(" (") + src.message + ")" : ""));
  };
  if (size < 8 || png_sig_cmp(data, 0, 8) != 0) throw Error(where + ": not a PNG file");
  check_chunk_lengths(data, size, where);
  PngReadStruct s;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, on_error, on_warning);
  if (s.png) s.info = png_create_info_struct(s.png);
  if (!s.png || !s.info) throw Error(where + ": libpng: out of memory");
  png_set_read_fn(s.png, &src, on_read);

  int passes = 1, bits_per_pixel = 0;
  if (!read_header(s.png, s.info, &passes, &bits_per_pixel)) throw fail("corrupt PNG header");
  const uint32_t w = png_get_image_width(s.png, s.info);
  const uint32_t h = png_get_image_height(s.png, s.info);
  const std::string dims = std::to_string(w) + " x " + std::to_string(h) + " pixels";
  if (uint64_t{w} * h > kMaxPngPixels)
    throw Error(where + ": image too large (" + dims + "; at most " +
                std::to_string(kMaxPngPixels) + ")");
  // Deflate expands data at most 1032-fold: a file too small to hold the image's pixels is corrupt,
  // however large the image it claims (this bounds what is allocated for a small crafted file).
  if (uint64_t{w} * h * static_cast<uint64_t>(bits_per_pixel) / 8 > uint64_t{1032} * size)
    throw Error(where + ": corrupt PNG (" + std::to_string(size) + " bytes cannot hold " + dims +
                ")");
  const size_t row_bytes = size_t{w} * 3;
  // The transforms above always give 8-bit RGB; rows of any other size would overrun the buffer.
  if (png_get_rowbytes(s.png, s.info) != row_bytes || png_get_channels(s.png, s.info) != 3 ||
      png_get_bit_depth(s.png, s.info) != 8)
    throw Error(where + ": unsupported PNG pixel layout");

  std::vector<uint8_t> rgb;
  if (passes == 1) {
    // Grown row by row, so that a small file that claims a large image allocates only as much as
    // its data really decodes to.
    for (uint32_t y = 0; y < h; ++y) {
      rgb.resize(rgb.size() + row_bytes);
      if (!read_row(s.png, rgb.data() + rgb.size() - row_bytes)) throw fail("corrupt PNG data");
    }
  } else {
    rgb.resize(row_bytes * h);
    for (int p = 0; p < passes; ++p)
      for (uint32_t y = 0; y < h; ++y)
        if (!read_row(s.png, rgb.data() + row_bytes * y)) throw fail("corrupt PNG data");
  }
  if (!read_end(s.png, s.info)) throw fail("corrupt PNG data after the image");
  if (text) {
    png_textp chunks = nullptr;
    int n = 0;
    png_get_text(s.png, s.info, &chunks, &n);
    for (int i = 0; i < n; ++i)
      text->emplace_back(chunks[i].key ? chunks[i].key : "", chunks[i].text ? chunks[i].text : "");
  }
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  return rgb;
}

std::vector<uint8_t> read_png(const std::string& path, int& width, int& height,
                              std::vector<std::pair<std::string, std::string>>* text) {
  const std::shared_ptr<MappedFile> f = MappedFile::open(path);
  return read_png_memory(f->data(), f->size(), path, width, height, text);
}

}  // namespace tessera
