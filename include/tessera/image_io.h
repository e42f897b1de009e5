// The files a front-end reads and writes besides model directories: PNG images (with text chunks
// such as "parameters", the generation settings in the convention of stable-diffusion front-ends)
// and NumPy .npy arrays of token ids or latents (C order, little-endian).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// rgb: height*width*3 bytes, row-major.
void write_png(const std::string& path, const uint8_t* rgb, int width, int height,
               const std::vector<std::pair<std::string, std::string>>& text = {});

// The same PNG's bytes, in memory (a server's response).
std::string png_bytes(const uint8_t* rgb, int width, int height,
                      const std::vector<std::pair<std::string, std::string>>& text = {});

// Reads an 8-bit RGB/RGBA PNG; returns RGB bytes and fills the text chunks (text may be null).
std::vector<uint8_t> read_png(const std::string& path, int& width, int& height,
                              std::vector<std::pair<std::string, std::string>>* text = nullptr);

template <class T>
struct NpyData {
  std::vector<int64_t> shape;
  std::vector<T> values;  // row-major, product(shape) values
};

// Integer data (i32, i64 or u8; out-of-range values throw), e.g. token grids.
NpyData<int32_t> read_npy_ints(const std::string& path);
// Float data (f32, f16 or f64), e.g. latents or masks.
NpyData<float> read_npy_floats(const std::string& path);
// Errors name the file; values.size() must equal the product of shape.
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               std::span<const int32_t> values);
void write_npy(const std::string& path, const std::vector<int64_t>& shape,
               std::span<const float> values);

// "[2, 3]", as the engine's messages print shapes.
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace tessera
