// Writing generated images: one PNG per image (numbered _0000.. when several) or one grid sheet,
// each with its generation parameters in a PNG text chunk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/tessera.h"

namespace tessera::cli {

// path_0000.png style names when n > 1.
std::string numbered(const std::string& path, size_t i, size_t n);

// Writes the n files numbered(path, i, n) in order with write(i, name), logging each. When one
// fails, the error says which were written before it, e.g. "cannot write out_0003.png: No space
// left on device (written: out_0000.png, out_0001.png, out_0002.png)". Those stay: each is a
// complete file (the writes are atomic), so they are kept rather than deleted, and the message
// says exactly which ones a retry may skip.
void write_numbered(const std::string& path, int n,
                    const std::function<void(int i, const std::string& name)>& write);

// Decodes images [first, first + count) to RGB pixels [count, size, size, 3].
using DecodeImages = std::function<std::vector<uint8_t>(int first, int count)>;

// Chunk decoders over a model's token grids / MAR latents (all images, row-major); they keep
// references to `pipe` and the data.
DecodeImages decode_tokens(Pipeline& pipe, const std::vector<int32_t>& tokens);
DecodeImages decode_latents(Pipeline& pipe, const std::vector<float>& latents);

// Writes n images, decoding them a few at a time so that a long run holds only a chunk's pixels
// (a --grid sheet needs them all). params[i] goes into image i's "parameters" text chunk.
void write_pngs(const DecodeImages& decode, int n, int size, const std::string& out, bool grid,
                const std::vector<std::string>& params);

}  // namespace tessera::cli
