// The MAR side of the CLI (generate, forward, decode, bench on a MAR model directory): the same
// subcommands and flags as for LlamaGen, plus MAR's and continuous speculative decoding's own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "run_settings.h"
#include "tessera/mar.h"

namespace tessera::cli {

struct MarRunOptions {
  std::string model;
  int threads = 0;
  bool check_weights = true;   // --no-check-weights turns the NaN/Inf scan off
  std::string device = "cpu";  // --device
  bool quiet = false;
  int class_id = -1;  // -1 with uncond: the unconditional embedding
  bool uncond = false;
  int n = 1;
  MarGenerateOptions gen;  // sampling, spec, seed, batch
};

struct MarGenerateOutputs {
  std::string png, latents, stats, heatmap;
  bool grid = false;
  size_t first_name = 0;  // --output-begin-idx
  RunSettings settings;   // stored in every image (with its image-index) and in the stats
  std::string run_line;   // logged once generation is under way
};
// Returns the images generated: fewer than o.n when Ctrl-C stopped the run (every one written).
int mar_generate(const MarRunOptions& o, const MarGenerateOutputs& out);

// z [seq_len, dim] of the MAE for one canvas: latents .npy [seq_len, token_dim] (or [1, ...]),
// unknown .npy [seq_len] (nonzero = masked; default: all known).
void mar_forward(const MarRunOptions& o, const std::string& latents, const std::string& unknown,
                 const std::string& z_out);

// Decodes latents .npy [n, seq_len, token_dim] (or [seq_len, token_dim]) to PNGs.
void mar_decode(const MarRunOptions& o, const std::string& latents, const std::string& png,
                bool grid);

// Vanilla and each method x draft length, per batch size, in one run.
struct MarBenchOptions {
  std::vector<std::string> methods;
  std::vector<int> draft_lens, batches;
  std::string format = "md";  // md (table), csv or json, as the LlamaGen bench
  bool legend = false;        // the columns' definitions after the table
};
void mar_bench(const MarRunOptions& o, const MarBenchOptions& b);

}  // namespace tessera::cli
