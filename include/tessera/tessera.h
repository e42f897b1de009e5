// tessera public API: load a model directory, generate image tokens, compute logits, decode
// tokens to pixels. The CLI (tools/cli) is a thin layer over this header.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tessera/config.h"
#include "tessera/error.h"
#include "tessera/methods.h"

namespace tessera {

// What an image is conditioned on.
struct Condition {
  enum class Kind { Class, Caption, Unconditional, Prompt } kind = Kind::Unconditional;
  int class_id = -1;
  // Caption: T5 features [T, caption_dim] (row-major) and the valid-row mask [T] (1 = real token).
  std::vector<float> caption;
  std::vector<uint8_t> caption_mask;
  // Prompt: typed text, which Pipeline::generate encodes with the model's text encoder into a
  // Caption (Pipeline::text_condition). A Caption made from a prompt keeps the text here.
  std::string prompt;

  static Condition label(int id);
  static Condition unconditional();
  static Condition text(std::string prompt);
  // From features [rows, dim]. With rows < T the features are left-padded to T rows as LlamaGen
  // does; rows that are all zero are treated as padding.
  static Condition from_caption(std::vector<float> features, int rows, int dim,
                                const GptConfig& config);
  // Reads a caption feature file: .npy [rows, dim] (or [1, rows, dim]) or .safetensors with
  // tensor "caption" (and optional "mask").
  static Condition caption_file(const std::string& path, const GptConfig& config);
};

// What is done to a typed prompt before it is tokenized. Clean: LlamaGen's T5Embedder default,
// clean_caption twice (URLs, HTML, @names, ids, file names, CJK and stray punctuation removed,
// quotes and dashes unified, lowercased; docs/methods.md names what differs from the Python).
// Lower: the embedder's other path (use_text_preprocessing=False), lower().strip(). None: the
// text as given (transformers' tokenizer alone).
enum class TextPreprocessing { Clean, Lower, None };

// A sampling setting left at these values is the model's: its config.json "sampling" when it
// has one, else LlamaGen's default (cfg 4, temperature 1, top-k 2000, top-p 1). So a program that
// sets nothing samples as `tessera generate` does (the emoji model: cfg 1).
inline constexpr float kFromModel = std::numeric_limits<float>::lowest();
inline constexpr int kFromModelInt = std::numeric_limits<int>::min();

struct SamplingOptions {
  float cfg_scale = kFromModel;  // classifier-free guidance scale (<= 1: off)
  float cfg_interval = -1.0f;    // guide only while the step index <= this (-1: always)
  float temperature = kFromModel;
  int top_k = kFromModelInt;  // 0: off
  float top_p = kFromModel;   // 1: off
};

// s with each setting left to the model (kFromModel) taken from d, else from LlamaGen's defaults.
SamplingOptions resolve_sampling(const SamplingOptions& s, const SamplingDefaults& d = {});

// What a speculative round costs on this machine, for --draft-len auto: verify[k - 1] is the
// seconds of one target forward of k positions (the last token and k - 1 drafts), draft_step the
// seconds of one draft-model step (0 for Jacobi drafts).
struct DraftCosts {
  std::vector<double> verify;
  double draft_step = 0.0;
  bool operator==(const DraftCosts&) const = default;
};

// draft_len value: choose each round's draft length from measured costs and past acceptance.
inline constexpr int kDraftLenAuto = -1;
inline constexpr int kMaxDraftHold = 1024;  // SpeculativeOptions::auto_hold's largest

// Speculative decoding (docs/methods.md). A method is a drafter (a draft model, or Jacobi
// iteration) plus an acceptance rule and its resampling distribution; tessera/methods.h lists the
// methods and their parameters.
struct SpeculativeOptions {
  std::string method = "vanilla";  // a discrete (or Any) method of registered_methods()
  std::string draft_model;  // draft model directory (same VQ vocabulary); empty: Jacobi drafts
  int draft_len = 0;        // draft tokens per round (Jacobi: window incl. the root); 0: default
  // kDraftLenAuto: each round drafts the length that maximises expected tokens per second,
  // E[tokens(L)] / (cost_draft(L) + cost_verify(L)), up to max_auto_len (0: 16 drafts; Jacobi: a
  // 32-token window). Costs come from `auto_costs` when given, else from a calibration of this
  // model on this machine, cached in $XDG_CACHE_HOME/tessera (~/.cache/tessera). Lossless methods
  // stay exact: a round's length depends only on the image's past rounds. The tokens, though,
  // depend on the lengths chosen, so they repeat only where the costs do (give auto_costs, or a
  // fixed length, to reproduce images on another machine).
  int max_auto_len = 0;
  DraftCosts auto_costs;
  // kDraftLenAuto: the most rounds a chosen length is held for, at most kMaxDraftHold (0: 32 where
  // rounds run in bursts on the device loop, which repeats one length: a draft model's chains,
  // Jacobi windows; else 1: a choice every round). A held length doubles its span while the
  // choice repeats; the lengths, hence the images, repeat where the hold does
  // (GenerateStats::draft_hold gives it back).
  int auto_hold = 0;
  std::string resample;  // "" (method default) | vanilla | optimal (G*, COOL-SD Eq. 5)
  // "": chain drafts (Medusa methods: the chain of the heads' top-1 tokens). Else a draft tree,
  // verified in one target forward by any rule: static (EAGLE-1, LANTERN++ static trees): chain:N,
  // kary:B1,B2,..., naive_extend_57, mc_sim_7b_63, medusa_2_7b_63 or a JSON file of EAGLE
  // choices; or EAGLE-2's dynamic tree, dynamic[:DEPTH,TOPK,TOTAL] (draft models and EAGLE
  // drafters). A fixed draft_len cuts the tree at that depth; auto cuts each round's at the depth
  // with the most expected tokens per second (a node budget).
  std::string tree;
  MethodParams params;  // the method's parameters, by name ("lantern.k"); unset: defaults
  // Analysis: after this many rounds an image is finished by the target alone (0: never). The
  // bound of COOL-SD Eq. 4 is about one round followed by target sampling.
  int max_rounds = 0;
  bool operator==(const SpeculativeOptions&) const = default;
};

// The draft lengths `tessera tune` sweeps by default: tokens drafted after the root with a draft
// model, and Jacobi windows (the defaults, 5 and 16, in the middle).
inline const std::vector<int> kDraftLenTuneGrid = {3, 5, 8};
inline const std::vector<int> kJacobiWindowTuneGrid = {8, 16, 24};

// Where tokens are drawn. Vanilla sampling's device loop draws each token where the logits are,
// replays the step (forward, draw, counters) as one graph and reads tokens back once a burst; a
// speculative round's device loop makes the target distributions and walks the drafts (chains and
// trees) where the logits are and reads back only each image's verdict (rounds under the ratio
// rules: exact, uniform-rsd, cool-sd, amplify, addition; and LANTERN; other rounds verify on the
// host), with the draft model's chains drawn there too. The host loop
// reads every step's logits back and draws on the host. Auto: the device loop on a GPU, the host
// loop on the CPU (where both draw the same tokens).
enum class DeviceLoop { Auto, On, Off };

struct GenerateOptions {
  SamplingOptions sampling;
  SpeculativeOptions spec;
  uint64_t seed = 0;
  int batch = 1;                   // images generated together (each with its own RNG stream)
  uint64_t first_image_index = 0;  // image i of the call uses RNG stream first_image_index + i
  int max_tokens = 0;              // > 0: stop after this many tokens per image (benchmarks)
  DeviceLoop device_loop = DeviceLoop::Auto;  // where tokens are drawn (DeviceLoop)
  // Called after every generated token: (tokens done, tokens total) over the whole call.
  std::function<void(int64_t, int64_t)> progress;
  // Cancellation: when non-null and set (from any thread, or a signal handler: it is only
  // loaded), generation stops before starting the next batch. The batch in flight is finished,
  // so generate returns the grids of every finished image, in order, fewer than the conditions;
  // `stats` covers just those.
  const std::atomic<bool>* cancel = nullptr;
  // Called as each image finishes, in order: (its index among the conditions, its token grid).
  // A front-end writes the image at once, so that a run stopped later keeps every finished one.
  // An exception it throws ends generate.
  std::function<void(size_t, const std::vector<int32_t>&)> on_image;
};

// Per-image record of a generation.
struct ImageStats {
  int64_t tokens = 0;
  int64_t rounds = 0;           // target forwards after the prefill (verification rounds)
  int64_t target_forwards = 0;  // NFE of the target, prefill included
  int64_t draft_forwards = 0;   // draft-model forwards this image took part in
  std::vector<int64_t> proposed, accepted;  // per draft depth 1..L: drafts verified / accepted
  // Per token (raster order): the draft depth at which it was accepted, 0 if the target sampled it.
  std::vector<uint8_t> accepted_depth;
  // Rounds per draft depth: rounds_by_depth[d] rounds drafted d tokens (--draft-len auto's
  // choices; a fixed length drafts its depth but where the image's end cuts it shorter).
  std::vector<int64_t> rounds_by_depth;
  // Draft nodes the target verified, over all rounds (a chain's nodes are its depth; a tree's
  // its node count, the node budget --draft-len auto chose).
  int64_t draft_nodes = 0;
  // Hawk's heads (hawk methods): per token (raster order), the depth d of the vertical head whose
  // cached proposal was accepted there, 0 elsewhere; empty when no vertical proposal was.
  std::vector<uint8_t> accepted_vertical;
  // Acceptance rate per draft depth: accepted / verified (0 where nothing was verified).
  std::vector<double> acceptance_by_depth() const;
  // Mean accepted length: tokens per verification round (the prefill's first token excluded).
  double mean_accepted_length() const {
    return rounds > 0 ? static_cast<double>(tokens - 1) / rounds : 0.0;
  }
};

struct GenerateStats {
  int64_t images = 0, tokens = 0, forward_passes = 0;  // forward_passes: batched target forwards
  int64_t draft_forward_passes = 0;                    // batched draft-model forwards
  double seconds = 0.0, prefill_seconds = 0.0;
  // Wall time split: target forwards, drafting (draft model or Jacobi bookkeeping), and
  // verification (target distributions, acceptance rules, resampling).
  double target_seconds = 0.0, draft_seconds = 0.0, verify_seconds = 0.0;
  double rule_seconds = 0.0;  // the part of verify_seconds spent in acceptance rules and resampling
  int64_t device_steps = 0;   // vanilla steps run by the device loop (DeviceLoop)
  int64_t replayed_steps = 0;         // ... of them replayed as a captured graph (a GPU)
  int64_t device_rounds = 0;          // speculative rounds verified by the device loop (DeviceLoop)
  int64_t device_drafted_rounds = 0;  // ... whose draft model's chain was drawn on the device
  int64_t replayed_draft_rounds = 0;  // ... of them with the chain's forwards a replayed graph
  // Device-loop rounds whose target pass and verification replayed a captured graph (a GPU).
  int64_t replayed_verify_rounds = 0;
  // Device-loop rounds run in bursts: chains repeated on the device, committed there, the host
  // reading back once a burst (DecoderSettings::device_burst rounds at most).
  int64_t burst_rounds = 0;
  std::vector<ImageStats> per_image;  // in the order of the conditions
  // One-line notes for the user about the run (a lossy method outside the model's validated
  // settings, docs/quality.md); front-ends print them.
  std::vector<std::string> notes;
  // The draft tree speculative rounds verified: a --tree spec or the heads' default (Medusa's
  // chain:K, Hawk's Cartesian product); empty for chains.
  std::string tree;
  // The costs --draft-len auto chose each round's length from (SpeculativeOptions::auto_costs, or
  // this machine's calibration); empty for a fixed length. Given back as auto_costs, they repeat
  // the run's lengths, hence its images, on any machine.
  DraftCosts draft_costs;
  // The hold those lengths were chosen with (SpeculativeOptions::auto_hold, resolved); 0 for a
  // fixed length. Given back as auto_hold with the costs, they repeat the run's lengths on either
  // loop.
  int draft_hold = 0;

  int64_t rounds() const;
  int64_t target_forwards() const;
  double mean_accepted_length() const;           // over all images: (tokens - images) / rounds
  std::vector<int64_t> rounds_by_depth() const;  // summed over images
  double mean_draft_depth() const;               // drafted tokens per round
  double mean_draft_nodes() const;  // drafted nodes per round (a tree's size; chains: the depth)
  // Acceptance rate per draft depth (accepted / verified), over all images.
  std::vector<double> acceptance_by_depth() const;
};

struct LoadOptions {
  bool load_decoder = true;  // false: skip vq.safetensors even if present
  int threads = 0;           // 0 = every CPU the process may use (more are clamped, with a note)
  // Scan every weight for NaN/Inf at load (an error names the tensor). Turning it off is unsafe:
  // a corrupt checkpoint then yields noise images with exit code 0.
  bool check_weights = true;
  // Where the model runs: "cpu", "cuda" (= "cuda:0") or "cuda:N". A CUDA device that this build
  // or machine lacks is a ParameterError("device") before anything is read.
  std::string device = "cpu";
  // The T5 encoder directory of typed prompts (t2i); empty: the one config.json's companions
  // name ("text_encoder"). Loaded by the first prompt that needs it.
  std::string text_encoder;
  TextPreprocessing text_preprocessing = TextPreprocessing::Clean;  // LlamaGen's default
};

// What Pipeline::load took: wall time, and the part spent scanning weights for NaN/Inf.
struct LoadReport {
  double seconds = 0.0;
  int64_t checked_bytes = 0;
  double check_seconds = 0.0;
};

struct MarGenerateOptions;  // tessera/mar.h
class Generation;           // tessera/generation.h
struct MarStats;            // tessera/mar.h

// The arithmetic of one forward (Pipeline::forward_flops), split by the units that can run it: the
// weights' matrix multiplies (bf16 ones on AMX where the CPU has it) and attention (f32 FMAs).
struct ForwardFlops {
  double matmul = 0.0;
  double attention = 0.0;
  double total() const { return matmul + attention; }
};

// One pipeline for every model family: load() reads DIR/config.json and builds the family it
// names. LlamaGen models generate discrete token grids (generate, decode); MAR models generate
// continuous latents (generate_latents, decode_latents; their options are in tessera/mar.h).
// Calling the other family's functions throws an Error that says which model it is.
//
// Threads may share a LlamaGen Pipeline: generate, start_generation, validate and decode may be
// called from several threads at once, each call with its own sessions (KV caches) over the
// shared read-only weights; draft models and heads are loaded once, by the first call that needs
// them, and kept while the Pipeline lives. The CPU worker pool runs one thread's parallel region
// at a time (the others run theirs on their own thread), so threads share the cores rather than
// multiply them. A Generation is used by one thread at a time.
class Pipeline {
 public:
  static std::unique_ptr<Pipeline> load(const std::string& model_dir, const LoadOptions& opts = {});
  ~Pipeline();

  const ModelConfig& config() const;
  // The sampling settings generate uses for those left to the model: resolve_sampling({},
  // config().sampling).
  SamplingOptions default_sampling() const;
  const LoadReport& load_report() const;
  // Bytes the engine's backend can still allocate (front-ends size their own buffers by it).
  int64_t available_memory() const;
  // The name of the backend the model runs on ("cpu", or the CUDA backend's name).
  std::string device() const;
  const std::string& architecture() const;  // "llamagen" | "mar"
  bool continuous_tokens() const;           // MAR: latents instead of token ids
  bool has_decoder() const;                 // a VQ (LlamaGen) or VAE (MAR) decoder was loaded
  void set_threads(int n);
  int threads() const;     // CPU threads the engine runs on
  int image_size() const;  // decoded pixels per side

  // ---- discrete tokens (LlamaGen) --------------------------------------------------------------
  // One token grid (grid*grid ids, raster order) per condition.
  std::vector<std::vector<int32_t>> generate(const std::vector<Condition>& conditions,
                                             const GenerateOptions& opts,
                                             GenerateStats* stats = nullptr);
  // A generation stepped by its caller (include/tessera/generation.h): requests added and
  // cancelled between steps, all with opts' method and sampling settings, up to opts.batch at once.
  // Raises generate's errors for opts.
  std::unique_ptr<Generation> start_generation(const GenerateOptions& opts);
  // Raises the error generate would raise for opts (a bad setting, a draft model that does not
  // fit), without generating: a front-end checks every run of a sweep before the first starts.
  // Loads the draft model and builds the method's tables, which generate then reuses.
  void validate(const GenerateOptions& opts);
  // Logits [tokens.size() + 1, vocab] without guidance: row i is the next-token logits after
  // the prefix and the first i tokens.
  std::vector<float> forward_logits(const Condition& condition, std::span<const int32_t> tokens);
  // The Caption condition of a typed prompt (t2i): preprocessed, tokenized to at most the model's
  // caption length (longer prompts are cut, with a note on stderr naming the limit), encoded by the
  // text encoder (LoadOptions::text_encoder or the model's companion) and left-padded as LlamaGen
  // pads captions. Errors: a c2i model, no text encoder, a width that is not caption_dim, an
  // empty prompt. generate() does this for Prompt conditions itself.
  Condition text_condition(const std::string& prompt);
  // Decoder output [n, 3, H, W] in nominal [-1, 1] for n token grids.
  std::vector<float> decode_float(std::span<const int32_t> tokens, int n);
  // RGB pixels [n, H, W, 3].
  std::vector<uint8_t> decode(std::span<const int32_t> tokens, int n);
  // o with the model's validated settings for o.method (config.json "quality", docs/quality.md)
  // filled in where o leaves them unset: the options generate actually runs.
  SpeculativeOptions with_model_defaults(const SpeculativeOptions& o) const;
  // Bytes of transformer weights read per decode step (every layer matrix and the head).
  int64_t weight_bytes_per_step() const;
  // Seconds of one target forward of k = 1..max_k new positions per sequence (both CFG halves
  // when `cfg`), every row returning logits, after half an image in the KV cache: the best of
  // `repeats` each (tessera bench --verify-cost; the calibration of --draft-len auto).
  std::vector<double> forward_seconds(int max_k, bool cfg, int repeats = 3);
  // Seconds of verifying one image's chain of k = 1..max_k drafts where the target's logits are,
  // as the speculative device loop does (the round's upload, the k + 1 target distributions, the
  // walk with a rejection and its residual draw, the verdicts' download), each the best of
  // `repeats`: the round's target side beside the forward. Empty where the backend cannot
  // (a vocabulary above a GPU's kMaxDeviceSampleVocab).
  std::vector<double> verify_seconds(int max_k, bool cfg, int repeats = 3);
  // Floating-point operations of that forward for k: 2 per weight and row in the matrix
  // multiplies, and attention (QK^T and AV) over the context it sees.
  ForwardFlops forward_flops(int k, bool cfg) const;

  // ---- continuous tokens (MAR) -----------------------------------------------------------------
  // One image per label (a class id, or -1 for the unconditional embedding): tokens
  // [seq_len * token_dim] each (MAR's scaled latents, raster order).
  std::vector<std::vector<float>> generate_latents(const std::vector<int>& labels,
                                                   const MarGenerateOptions& opts,
                                                   MarStats* stats = nullptr);
  // The same for generate_latents.
  void validate_latents(const MarGenerateOptions& opts);
  // MAE forward for debugging: z [seq_len, dim] of every position of one canvas (tokens
  // [seq_len * token_dim], unknown [seq_len] with 1 = masked).
  std::vector<float> forward_z(int label, std::span<const float> tokens,
                               std::span<const uint8_t> unknown);
  // VAE decoder output [n, 3, H, W] (nominal [-1, 1]) and RGB pixels [n, H, W, 3].
  std::vector<float> decode_latents_float(std::span<const float> latents, int n);
  std::vector<uint8_t> decode_latents(std::span<const float> latents, int n);

  struct Impl;

 private:
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The architecture named by DIR/config.json ("llamagen" or "mar").
std::string model_architecture(const std::string& model_dir);

}  // namespace tessera
