#include "tessera/image_io.h"

#include <png.h>

#include <new>
#include <string>

#include "tessera/error.h"
#include "tessera/file_io.h"

namespace tessera {

namespace {
// libpng's output callback: appends to the std::string behind png_get_io_ptr.
void append_bytes(png_structp png, png_bytep data, png_size_t n) {
  auto* out = static_cast<std::string*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    out->append(reinterpret_cast<const char*>(data), n);
  } catch (const std::bad_alloc&) {
    ok = false;
  }
  // png_error longjmps: no exception may cross libpng's C frames, nor a jump leave a handler.
  if (!ok) png_error(png, "out of memory");
}
void no_flush(png_structp) {}

// The libpng calls, alone in a function with no C++ objects for a longjmp to skip: appends the
// PNG to out; false when libpng fails.
bool encode_png(std::string* out, const uint8_t* rgb, int width, int height, png_text* chunks,
                int num_chunks) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!png || !info) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, out, append_bytes, no_flush);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (num_chunks > 0) png_set_text(png, info, chunks, num_chunks);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y)
    png_write_row(png, const_cast<png_bytep>(rgb + static_cast<size_t>(y) * width * 3));
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return true;
}
}  // namespace

std::string png_bytes(const uint8_t* rgb, int width, int height,
                      const std::vector<std::pair<std::string, std::string>>& text) {
  std::vector<png_text> chunks(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    chunks[i].compression = PNG_TEXT_COMPRESSION_NONE;
    chunks[i].key = const_cast<char*>(text[i].first.c_str());
    chunks[i].text = const_cast<char*>(text[i].second.c_str());
    chunks[i].text_length = text[i].second.size();
  }
  std::string bytes;
  if (!encode_png(&bytes, rgb, width, height, chunks.data(), static_cast<int>(chunks.size())))
    throw Error("libpng failed encoding a " + std::to_string(width) + "x" + std::to_string(height) +
                " image");
  return bytes;
}

// The PNG is encoded in memory and then written atomically: the file is never seen half-written.
void write_png(const std::string& path, const uint8_t* rgb, int width, int height,
               const std::vector<std::pair<std::string, std::string>>& text) {
  write_file_atomic(path, png_bytes(rgb, width, height, text));
}

}  // namespace tessera
