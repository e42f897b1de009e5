// The T5 text encoder (src/models/t5_encoder.*, t5_tokenizer.*, the public TextEncoder) against
// transformers: a tiny random T5 v1.1 encoder and SentencePiece model made with transformers'
// own classes by python/make_t5_fixtures.py (tests/fixtures/t5/golden/manifest.json), converted
// by tools/convert_t5.py. Token ids must be identical on the whole prompt corpus, hidden states
// within 1e-4 relative (f32), and a typed prompt must give the official LlamaGen t2i code's greedy
// tokens end to end.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_harness.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "models/prompt_text.h"
#include "models/t5_encoder.h"
#include "models/t5_relative_position.h"
#include "tessera/image_io.h"
#include "tessera/text_encoder.h"

using namespace tessera;
namespace fs = std::filesystem;

namespace {

const std::string kT5 = std::string(TESSERA_FIXTURES) + "/t5/";
const std::string kGolden = kT5 + "golden/";
const std::string kT2i = std::string(TESSERA_FIXTURES) + "/llamagen/t2i_f32";

std::vector<std::string> prompts() {
  std::ifstream f(kGolden + "prompts.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  return j.get<std::vector<std::string>>();
}

// Row block i of a ragged golden (values concatenated, offsets [P + 1]).
struct Ragged {
  std::vector<int32_t> offsets;
  std::vector<float> f32;
  std::vector<int32_t> i32;
  int width = 1;
};

Ragged ragged_ints(const std::string& values, const std::string& offsets) {
  Ragged r;
  r.i32 = read_npy(kGolden + values).as_i32();
  r.offsets = read_npy(kGolden + offsets).as_i32();
  return r;
}

Ragged ragged_floats(const std::string& values, const std::string& offsets) {
  Ragged r;
  const NpyArray a = read_npy(kGolden + values);
  r.f32 = a.as_f32();
  r.width = static_cast<int>(a.shape.back());
  r.offsets = read_npy(kGolden + offsets).as_i32();
  return r;
}

TextEncoder& encoder(const std::string& dir = "f32") {
  static std::map<std::string, std::unique_ptr<TextEncoder>> cache;
  auto& e = cache[dir];
  if (!e) e = TextEncoder::load(kT5 + dir);
  return *e;
}

// max |got - want| / max |want| over one prompt's rows.
double relative_error(std::span<const float> got, std::span<const float> want) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double{got[i]} - want[i]));
    scale = std::max(scale, std::fabs(double{want[i]}));
  }
  return err / std::max(scale, 1e-30);
}

}  // namespace

// Every prompt of the corpus (unicode, emoji, numbers, white space, texts over 120 tokens):
// the ids of transformers' tokenizer (AutoTokenizer, as LlamaGen's T5Embedder loads it), EOS
// appended, cut to 120 with EOS kept.
TEST(T5Tokenizer, IdsEqualTransformersOnTheCorpus) {
  const std::vector<std::string> ps = prompts();
  const Ragged want = ragged_ints("ids.npy", "ids_offsets.npy");
  ASSERT_EQ(want.offsets.size(), ps.size() + 1);
  ASSERT_GE(ps.size(), 200u);
  int cut = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    bool truncated = false;
    const std::vector<int32_t> got = encoder().tokenize(ps[i], 120, &truncated);
    const std::vector<int32_t> w(want.i32.begin() + want.offsets[i],
                                 want.i32.begin() + want.offsets[i + 1]);
    EXPECT_EQ(got, w) << "prompt " << i << ": " << ps[i];
    cut += truncated;
  }
  EXPECT_GT(cut, 0) << "the corpus should hold prompts over 120 tokens";
}

// The encoder's last hidden states of the real tokens, f32 weights: within 1e-4 relative of
// transformers' T5EncoderModel in f32.
TEST(T5Encoder, HiddenStatesEqualTransformersF32) {
  const std::vector<std::string> ps = prompts();
  const Ragged want = ragged_floats("hidden_f32.npy", "hidden_offsets.npy");
  ASSERT_EQ(want.width, encoder().width());
  double worst = 0.0;
  for (size_t i = 0; i + 1 < want.offsets.size(); ++i) {
    const TextEncoding e = encoder().encode(ps[i], 120, TextPreprocessing::None);
    const size_t b = static_cast<size_t>(want.offsets[i]) * want.width,
                 n = static_cast<size_t>(want.offsets[i + 1] - want.offsets[i]) * want.width;
    ASSERT_EQ(e.features.size(), n) << "prompt " << i;
    const double r = relative_error(e.features, std::span(want.f32).subspan(b, n));
    EXPECT_LE(r, 1e-4) << "prompt " << i << ": " << ps[i];
    worst = std::max(worst, r);
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
}

// Padded to 120 with the attention mask (LlamaGen's get_text_embeddings): every row, padding
// rows included, as transformers computes them; the real rows equal the unpadded encoding's.
TEST(T5Encoder, PaddedRowsEqualTransformers) {
  const std::vector<std::string> ps = prompts();
  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(kGolden + "manifest.json"));
  const std::vector<int> which =
      manifest.at("goldens").at("ids_padded.npy").at("prompts").get<std::vector<int>>();
  const NpyArray want = read_npy(kGolden + "hidden_padded_f32.npy");
  const std::vector<int32_t> ids = read_npy(kGolden + "ids_padded.npy").as_i32();
  const std::vector<float> w = want.as_f32();
  const int64_t per = 120 * encoder().width();
  for (size_t k = 0; k < which.size(); ++k) {
    const TextEncoding e = encoder().encode(ps[which[k]], 120, TextPreprocessing::None, 120);
    EXPECT_EQ(e.ids, std::vector<int32_t>(ids.begin() + k * 120, ids.begin() + (k + 1) * 120));
    EXPECT_LE(relative_error(e.features, std::span(w).subspan(k * per, per)), 1e-4)
        << "prompt " << which[k];
    const TextEncoding u = encoder().encode(ps[which[k]], 120, TextPreprocessing::None);
    EXPECT_LE(relative_error(std::span(e.features).first(u.features.size()), u.features), 1e-5);
  }
}

// The four padded prompts as one batch of four, as transformers ran them: each sequence's rows
// depend on that sequence alone.
TEST(T5Encoder, ABatchEqualsTransformersBatch) {
  const std::vector<int32_t> ids = read_npy(kGolden + "ids_padded.npy").as_i32();
  const std::vector<int32_t> m = read_npy(kGolden + "mask_padded.npy").as_i32();
  const std::vector<uint8_t> mask(m.begin(), m.end());
  const std::vector<float> want = read_npy(kGolden + "hidden_padded_f32.npy").as_f32();
  T5Encoder enc(load_model_config(kT5 + "f32"), cpu_backend());
  const std::vector<float> got = enc.encode(ids, mask, 4);
  EXPECT_LE(relative_error(got, want), 1e-4);
}

// bf16 weights (tools/convert_t5.py --dtype bf16) against transformers' model.to(bfloat16),
// which also rounds every activation to bf16: tessera keeps f32 activations, so the bound is
// bf16's: 3e-2 relative.
TEST(T5Encoder, HiddenStatesNearTransformersBf16) {
  const std::vector<std::string> ps = prompts();
  const Ragged want = ragged_floats("hidden_bf16.npy", "hidden_bf16_offsets.npy");
  for (size_t i = 0; i + 1 < want.offsets.size(); ++i) {
    const TextEncoding e = encoder("bf16").encode(ps[i], 120, TextPreprocessing::None);
    const size_t b = static_cast<size_t>(want.offsets[i]) * want.width,
                 n = static_cast<size_t>(want.offsets[i + 1] - want.offsets[i]) * want.width;
    ASSERT_EQ(e.features.size(), n);
    EXPECT_LE(relative_error(e.features, std::span(want.f32).subspan(b, n)), 3e-2) << ps[i];
  }
}

// A typed prompt end to end: cleaned (LlamaGen's default; these prompts clean to their lowercase),
// tokenized to the model's 8 caption tokens, encoded,
// left-padded and masked as LlamaGen's sample_t2i.py does, then greedy generation with cfg 3:
// the official LlamaGen t2i code's tokens (python/tessera_ref/llamagen.py's generate on the
// same tiny model, with transformers' T5 features).
TEST(T5EndToEnd, TypedPromptGivesTheReferenceTokens) {
  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(kGolden + "manifest.json"));
  std::vector<std::string> typed;
  for (const auto& p : manifest.at("t2i").at("prompts")) typed.push_back(p.at("prompt"));
  ASSERT_EQ(typed.size(), 3u);
  const std::vector<int32_t> want = read_npy(kGolden + "t2i_greedy.npy").as_i32();
  LoadOptions lo;
  lo.text_encoder = kT5 + "f32";
  auto pipe = Pipeline::load(kT2i, lo);
  const int n = pipe->config().gpt.n_image_tokens();
  GenerateOptions o;
  o.sampling.cfg_scale = 3.0f;
  o.sampling.temperature = 0.0f;
  for (size_t k = 0; k < typed.size(); ++k) {
    const auto grids = pipe->generate({Condition::text(typed[k])}, o);
    EXPECT_EQ(grids.at(0), std::vector<int32_t>(want.begin() + k * n, want.begin() + (k + 1) * n))
        << typed[k];
    // The caption the engine fed the model: the reference's, row for row.
    const Condition c = pipe->text_condition(typed[k]);
    const std::vector<float> cap =
        read_npy(kGolden + "t2i_caption_" + std::to_string(k) + ".npy").as_f32();
    ASSERT_EQ(c.caption.size(), cap.size());
    std::vector<float> masked = c.caption;
    for (size_t t = 0; t < c.caption_mask.size(); ++t)
      if (!c.caption_mask[t])
        std::fill(masked.begin() + t * 32, masked.begin() + (t + 1) * 32, 0.0f);
    EXPECT_LE(relative_error(masked, cap), 1e-4) << typed[k];
  }
}

// Every offset of a 120-token prompt in the bucket transformers puts it in (its log in f32).
TEST(T5Encoder, RelativeBucketsEqualTransformers) {
  const std::vector<int32_t> b = read_npy(kGolden + "relative_buckets.npy").as_i32();
  const size_t n = b.size() / 2;
  for (size_t i = 0; i < n; ++i)
    EXPECT_EQ(t5_relative_position_bucket(b[i], 32, 128), b[n + i]) << "offset " << b[i];
}

// Python's str.lower().strip() for characters with one-character lowercase forms.
TEST(PromptText, LowercaseAndStripAsPython) {
  EXPECT_EQ(lowercase_and_strip("  A Photo of a CORGI \t\n"), "a photo of a corgi");
  EXPECT_EQ(lowercase_and_strip(
                "\u00c9T\u00c9 \u0416\u0418\u0412\u041e\u0419 \u03a3\u039f\u03a6\u0399\u0391"),
            "\u00e9t\u00e9 \u0436\u0438\u0432\u043e\u0439 \u03c3\u03bf\u03c6\u03b9\u03b1");
  EXPECT_EQ(lowercase_and_strip("\u3000emoji \U0001F600 stays\u2003"), "emoji \U0001F600 stays");
  EXPECT_EQ(lowercase_and_strip(" \t "), "");
  EXPECT_THROW(lowercase_and_strip("bad \xff byte"), Error);
  EXPECT_THROW(lowercase_and_strip("overlong \xc0\xaf"), Error);
  EXPECT_THROW(lowercase_and_strip("surrogate \xed\xa0\x80"), Error);
}

namespace {

// A copy of the f32 encoder directory to break, in a scratch directory of the test's own.
class T5Errors : public CliTest {
 protected:
  std::string copy_encoder() {
    const std::string dir = tmp("t5");
    fs::create_directories(dir);
    for (const char* f : {"config.json", "t5.safetensors", "spiece.model"})
      fs::copy_file(kT5 + "f32/" + f, dir + "/" + f);
    return dir;
  }
  static void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& f) {
    nlohmann::json j = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    f(j);
    std::ofstream(dir + "/config.json") << j.dump(2);
  }
  static std::string error_of(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }
};

}  // namespace

TEST_F(T5Errors, ATokenizerThatIsNotSentencePieceIsNamed) {
  const std::string dir = copy_encoder();
  std::ofstream(dir + "/spiece.model") << "this is a text file, not a model\n";
  const std::string e = error_of([&] { TextEncoder::load(dir); });
  EXPECT_NE(e.find("spiece.model: not a SentencePiece model"), std::string::npos) << e;
}

TEST_F(T5Errors, ATokenizerOfAnotherVocabularyIsNamed) {
  const std::string dir = copy_encoder();
  edit_config(dir, [](nlohmann::json& j) { j["t5"]["vocab_size"] = 50; });
  const std::string e = error_of([&] { TextEncoder::load(dir); });
  EXPECT_NE(e.find("the encoder's vocabulary has 50 rows"), std::string::npos) << e;
  const std::string d2 = tmp("eos");
  fs::create_directories(d2);
  for (const char* f : {"config.json", "t5.safetensors", "spiece.model"})
    fs::copy_file(kT5 + "f32/" + f, d2 + "/" + f);
  edit_config(d2, [](nlohmann::json& j) { j["tokenizer"]["eos_id"] = 3; });
  const std::string e2 = error_of([&] { TextEncoder::load(d2); });
  EXPECT_NE(e2.find("EOS and padding ids"), std::string::npos) << e2;
}

TEST_F(T5Errors, AHuggingFaceDirectoryAsksForTheConverter) {
  const std::string e = error_of([&] { TextEncoder::load(kT5 + "hf"); });
  EXPECT_NE(e.find("tools/convert_t5.py"), std::string::npos) << e;
}

TEST_F(T5Errors, AnImageModelIsNotATextEncoder) {
  const std::string e = error_of([&] { TextEncoder::load(kT2i); });
  EXPECT_NE(e.find("is not a text encoder"), std::string::npos) << e;
}

TEST_F(T5Errors, AnEmptyPromptIsRefused) {
  EXPECT_THROW(encoder().encode("   ", 120, TextPreprocessing::Lower), ParameterError);
  EXPECT_THROW(encoder().encode("*** ... ***", 120, TextPreprocessing::Clean), ParameterError);
  EXPECT_THROW(encoder().encode("", 120, TextPreprocessing::None), ParameterError);
  // Over the length limit (clean_caption's regexes are quadratic on some long inputs): refused
  // at once; at the limit it is encoded (and cut to 120 tokens).
  std::string dots;
  while (dots.size() < kMaxPromptBytes) dots += "a.";
  EXPECT_EQ(encoder().encode(dots, 120, TextPreprocessing::Clean).ids.size(), 120u);
  EXPECT_THROW(encoder().encode(dots + "a", 120, TextPreprocessing::Clean), ParameterError);
}

// A text encoder whose width is not the t2i model's caption_dim: a T5 of width 16 (random
// weights, the fixture's tokenizer) for the tiny t2i model's captions of width 32.
TEST_F(T5Errors, AnEncoderOfAnotherWidthIsNamed) {
  const std::string dir = copy_encoder();
  const ModelConfig mc = load_model_config(kT5 + "f32");
  const T5Config& c = mc.t5;
  const int64_t D = 16, I = c.inner_dim(), F = c.d_ff;
  std::map<std::string, HostTensor> t;
  auto put = [&](const std::string& name, Shape shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(static_cast<size_t>(n), 0.01f);
    HostTensor h{DType::F32, shape, {}};
    h.bytes.resize(v.size() * 4);
    std::memcpy(h.bytes.data(), v.data(), h.bytes.size());
    t[name] = std::move(h);
  };
  put("shared.weight", {c.vocab_size, D});
  put("encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight",
      {c.relative_attention_num_buckets, c.num_heads});
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string p = "encoder.block." + std::to_string(l) + ".layer.";
    for (const char* w : {"q", "k", "v"}) put(p + "0.SelfAttention." + w + ".weight", {I, D});
    put(p + "0.SelfAttention.o.weight", {D, I});
    put(p + "0.layer_norm.weight", {D});
    put(p + "1.DenseReluDense.wi_0.weight", {F, D});
    put(p + "1.DenseReluDense.wi_1.weight", {F, D});
    put(p + "1.DenseReluDense.wo.weight", {D, F});
    put(p + "1.layer_norm.weight", {D});
  }
  put("encoder.final_layer_norm.weight", {D});
  write_safetensors(dir + "/t5.safetensors", t);
  edit_config(dir, [](nlohmann::json& j) { j["t5"]["d_model"] = 16; });
  ASSERT_EQ(TextEncoder::load(dir)->width(), 16);
  LoadOptions lo;
  lo.text_encoder = dir;
  auto pipe = Pipeline::load(kT2i, lo);
  const std::string e = error_of([&] { pipe->text_condition("a red apple"); });
  EXPECT_NE(e.find("features have width 16"), std::string::npos) << e;
  EXPECT_NE(e.find("(caption_dim)"), std::string::npos) << e;
}

TEST_F(T5Errors, PromptsNeedATextConditionalModelAndItsEncoder) {
  auto c2i = Pipeline::load(std::string(TESSERA_FIXTURES) + "/llamagen/c2i_f32");
  std::string e = error_of([&] { c2i->text_condition("a red apple"); });
  EXPECT_NE(e.find("class-conditional (c2i)"), std::string::npos) << e;
  auto t2i = Pipeline::load(kT2i);  // its config.json names no text encoder
  e = error_of([&] { t2i->generate({Condition::text("a red apple")}, GenerateOptions{}); });
  EXPECT_NE(e.find("names no text encoder"), std::string::npos) << e;
}

// The command line: tessera encode writes what TextEncoder gives; generate takes a typed prompt
// with --text-encoder, and --caption-out writes a --caption file that reproduces the run.
TEST_F(T5Errors, EncodeAndGenerateFromTheCommandLine) {
  const std::string prompt = "A Red Apple on a table";
  CliResult r = run({"encode", "-m", kT5 + "f32", "--prompt", prompt, "--out", tmp("f.npy"),
                     "--ids-out", tmp("ids.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  const TextEncoding e = encoder().encode(prompt, 120, TextPreprocessing::Clean);  // the default
  EXPECT_EQ(read_npy(tmp("ids.npy")).as_i32(), e.ids);
  EXPECT_EQ(read_npy(tmp("f.npy")).as_f32(), e.features);
  r = run({"encode", "-m", kT5 + "f32", "--prompt", prompt, "--out", tmp("p.npy"), "--pad",
           "--max-length", "30"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_npy(tmp("p.npy")).shape, (Shape{30, 32}));

  r = run({"generate", "-m", kT2i, "--text-encoder", kT5 + "f32", prompt, "--cfg", "3",
           "--temperature", "0", "--tokens-out", tmp("a.npy"), "--caption-out", tmp("cap.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  r = run({"generate", "-m", kT2i, "--caption", tmp("cap.npy"), "--cfg", "3", "--temperature", "0",
           "--tokens-out", tmp("b.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(read_npy(tmp("a.npy")).as_i32(), read_npy(tmp("b.npy")).as_i32());

  // Bad input: one line, exit code 2 (or 1), no crash.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"encode", "-m", kT5 + "f32", "--prompt", " ", "--out",
                                 tmp("x.npy")},
        {"encode", "-m", kT2i, "--prompt", "a", "--out", tmp("x.npy")},
        {"generate", "-m", kT2i, "a red apple", "--tokens-out", tmp("x.npy")},
        {"generate", "-m", kT2i, "--text-encoder", kT5 + "f32", "--caption", tmp("cap.npy"),
         "--tokens-out", tmp("x.npy")}}) {
    r = run(args);
    EXPECT_TRUE(r.exited);
    EXPECT_NE(r.code, 0) << args[0] << " " << args[1];
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  }
}

// Every LlamaGen method runs from a typed prompt, drawing the images it draws from the prompt's
// caption (Pipeline::text_condition, as `generate --caption` of the --caption-out file would):
// draft models (the t2i model drafting for itself), Jacobi drafts, EAGLE's drafter and
// Medusa's and Hawk's heads of the tiny t2i target.
TEST(T5EndToEnd, EveryMethodRunsFromATypedPrompt) {
  LoadOptions lo;
  lo.text_encoder = kT5 + "f32";
  lo.threads = 1;
  auto pipe = Pipeline::load(kT2i, lo);
  const std::string spec = std::string(TESSERA_FIXTURES) + "/spec/";
  const std::string prompt = "An Old Castle near the lake";
  const Condition caption = pipe->text_condition(prompt);
  int ran = 0;
  for (const MethodInfo& m : registered_methods()) {
    if (m.tokens != TokenKind::Discrete) continue;
    SCOPED_TRACE(m.name);
    GenerateOptions o;
    o.seed = 3;
    o.sampling.cfg_scale = 3.0f;
    o.sampling.temperature = 1.0f;
    o.sampling.top_k = 0;
    o.spec.method = m.name;
    if (m.drafts == DraftSource::DraftModel || m.drafts == DraftSource::ModelOrJacobi)
      o.spec.draft_model = m.drafter == "eagle"    ? spec + "t2i_eagle"
                           : m.drafter == "medusa" ? spec + "tiny_medusa"
                           : m.drafter == "hawk"   ? spec + "tiny_hawk"
                                                   : kT2i;
    const auto typed = pipe->generate({Condition::text(prompt)}, o);
    const auto fed = pipe->generate({caption}, o);
    ASSERT_EQ(typed.size(), 1u);
    EXPECT_EQ(typed[0].size(), 16u);
    EXPECT_EQ(typed, fed);
    ++ran;
  }
  EXPECT_GE(ran, 10);
}

// tessera bench -m T5_DIR: the encode time of one prompt of --tokens tokens (no timing asserted).
class T5Bench : public CliTest {
 protected:
  static std::string eval_python() {
    const char* env = std::getenv("TESSERA_EVAL_PYTHON");
    return env && *env ? env : "/opt/tessera-eval-venv/bin/python3";
  }
};

TEST_F(T5Bench, JsonHasTheFiguresOfAPromptOfTheGivenTokens) {
  const CliResult r =
      run({"bench", "-m", kT5 + "f32", "--json", "-r", "2", "--tokens", "40", "--quiet"});
  ASSERT_TRUE(r.exited) << r.err;
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["architecture"], "t5_encoder");
  EXPECT_EQ(j["tokens"], 40);
  EXPECT_EQ(j["rounds"], 2);
  EXPECT_EQ(j["weights_dtype"], "f32");
  EXPECT_EQ(j["ms_rounds"].size(), 2u);
  for (const char* k : {"ms", "tokens_per_s", "gflops", "gflop_per_encode", "load_seconds"}) {
    ASSERT_TRUE(j.contains(k) && j[k].is_number()) << k;
    EXPECT_GT(j[k].get<double>(), 0.0) << k;
  }
  EXPECT_GE(j["threads"].get<int>(), 1);
  EXPECT_FALSE(j.contains("speedup_vs_torch"));
  // 2 layers: 2 * 40 * 2 * (4 * 32 * 32 + 3 * 32 * 64) + 2 * 4 * 40 * 40 * 32 FLOPs
  EXPECT_NEAR(j["gflop_per_encode"].get<double>(), 2.048e-3, 1e-12);
}

TEST_F(T5Bench, TheTableSaysHowManyTokensThePromptHad) {
  const CliResult r = run({"bench", "-m", kT5 + "bf16", "-r", "1", "--tokens", "7", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("one prompt of 7 tokens"), std::string::npos) << r.out;
}

TEST_F(T5Bench, ImageFlagsAreRefused) {
  for (const std::vector<std::string>& extra : {std::vector<std::string>{"--methods", "sd"},
                                                {"--against", kT5 + "bf16"},
                                                {"-n", "2"},
                                                {"--cfg", "2"},
                                                {"--verify-cost"},
                                                {"--concurrent", "2"}}) {
    std::vector<std::string> args = {"bench", "-m", kT5 + "f32"};
    args.insert(args.end(), extra.begin(), extra.end());
    expect_error(args, {extra[0], "does not apply to a T5 text encoder"});
  }
  expect_error({"bench", "-m", kT5 + "f32", "--tokens", "0"}, {"--tokens", "at least 1"});
}

TEST_F(T5Bench, TorchWithoutTransformersIsOneLine) {
  const CliResult r = run({"bench", "-m", kT5 + "f32", "--torch", "-r", "1"},
                          "TESSERA_EVAL_PYTHON=/nonexistent/python3");
  ASSERT_TRUE(r.exited);
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("error: --torch needs transformers: run scripts/setup-deps.sh", 0), 0u)
      << r.err;
}

TEST_F(T5Bench, TorchTimesTransformersOnTheSameWeights) {
  const std::string python = eval_python();
  // The set-up makes the venv (scripts/setup-deps.sh); a skip would hide a broken set-up.
  ASSERT_TRUE(fs::exists(python)) << python << " is missing: run scripts/setup-deps.sh";
  const CliResult r = run(
      {"bench", "-m", kT5 + "f32", "--torch", "--json", "-r", "1", "--tokens", "12", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["speedup_vs_torch"].get<double>(), 0.0);
  EXPECT_EQ(j["torch"]["impl"], "transformers");
  EXPECT_EQ(j["torch"]["tokens"], 12);
}

// --from-png replays a typed prompt: the prompt and a non-default preprocessing are among the
// settings the PNG stores, so the replay writes the same image.
TEST_F(T5Errors, FromPngReplaysATypedPrompt) {
  CliResult r = run({"generate", "-m", kT2i, "--text-encoder", kT5 + "f32", "Two (Dogs)", "-o",
                     tmp("a.png"), "--seed", "3", "--text-preprocessing", "none"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("text_preprocessing=none"), std::string::npos) << r.err;
  r = run({"generate", "-m", kT2i, "--text-encoder", kT5 + "f32", "--from-png", tmp("a.png"), "-o",
           tmp("b.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  int w = 0, h = 0, w2 = 0, h2 = 0;
  EXPECT_EQ(read_png(tmp("a.png"), w, h), read_png(tmp("b.png"), w2, h2));
  r = run({"generate", "-m", kT2i, "--text-encoder", kT5 + "f32", "Two (Dogs)", "-o", tmp("c.png"),
           "--seed", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(read_png(tmp("a.png"), w, h), read_png(tmp("c.png"), w2, h2))
      << "clean_caption drops the parentheses, which changes the tokens";
}
