// End-to-end checks of the tessera CLI: every bad input (broken model directory, corrupt weights,
// bad flags, bad token or caption files) must exit non-zero with exactly one stderr line
// "error: ..." that names the problem; the good paths write what they promise.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/npy.h"
#include "io/safetensors.h"
#include "tensor/cuda/cuda_backend.h"
#include "tessera/image_io.h"
#include "tessera/methods.h"

#include "cli_harness.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

class CliErrors : public CliTest {};
class CliOutput : public CliTest {};

// ---- the model directory and config.json ----------------------------------------------------

TEST_F(CliErrors, MissingModelDirectory) {
  expect_error(tokens_only(tmp_ / "no_such_model"), {"no_such_model"});
}

TEST_F(CliErrors, DirectoryWithoutConfig) {
  const fs::path dir = copy_model("c2i_f32");
  fs::remove(dir / "config.json");
  expect_error(tokens_only(dir), {(dir / "config.json").string()});
}

TEST_F(CliErrors, ConfigInvalidJson) {
  const fs::path dir = copy_model("c2i_f32");
  spit(dir / "config.json", "{\"gpt\": {\"dim\": 64,");
  expect_error(tokens_only(dir), {(dir / "config.json").string(), "invalid JSON"});
}

TEST_F(CliErrors, ConfigMissingDim) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["gpt"].erase("dim"); });
  expect_error(tokens_only(dir), {"\"dim\"", "config.json"});
}

// ---- gpt.safetensors -------------------------------------------------------------------------

TEST_F(CliErrors, ConfigSamplingUnknownKey) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["sampling"] = {{"topk", 5}}; });
  expect_error(tokens_only(dir), {"unknown key \"topk\"", "sampling", "config.json"});
}

TEST_F(CliErrors, ConfigSamplingOutOfRange) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["sampling"] = {{"top_p", 1.5}}; });
  expect_error(tokens_only(dir), {"\"top_p\" must be in", "config.json"});
}

TEST_F(CliErrors, ConfigSamplingWrongType) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["sampling"] = {{"top_k", "many"}}; });
  expect_error(tokens_only(dir), {"\"top_k\" has the wrong type", "config.json"});
}

TEST_F(CliErrors, GptWeightsMissing) {
  const fs::path dir = copy_model("c2i_f32");
  fs::remove(dir / "gpt.safetensors");
  expect_error(tokens_only(dir), {(dir / "gpt.safetensors").string()});
}

TEST_F(CliErrors, GptWeightsTruncated) {
  const fs::path dir = copy_model("c2i_f32");
  const fs::path w = dir / "gpt.safetensors";
  fs::resize_file(w, fs::file_size(w) / 2);
  expect_error(tokens_only(dir), {w.string(), "truncated"});
}

TEST_F(CliErrors, GptHeaderLengthHuge) {
  const fs::path dir = copy_model("c2i_f32");
  const fs::path w = dir / "gpt.safetensors";
  std::string bytes = slurp(w);
  std::fill_n(bytes.begin(), 8, '\x7f');
  spit(w, bytes);
  expect_error(tokens_only(dir), {w.string(), "header"});
}

TEST_F(CliErrors, GptHeaderGarbage) {
  const fs::path dir = copy_model("c2i_f32");
  const fs::path w = dir / "gpt.safetensors";
  std::string bytes = slurp(w);
  std::fill_n(bytes.begin() + 8, 40, '#');
  spit(w, bytes);
  expect_error(tokens_only(dir), {w.string(), "header"});
}

TEST_F(CliErrors, ConfigShapeDisagreesWithWeights) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["gpt"]["dim"] = 128; });
  // The first tensor checked may be a matrix [.., 64] or a norm [64]; both shapes are named.
  expect_error(tokens_only(dir), {"gpt.safetensors", "tensor '", "64]", "128]"});
}

TEST_F(CliErrors, TensorMissing) {
  const fs::path dir = copy_model("c2i_f32");
  edit_weights(dir, [](auto& t) { t.erase("layers.1.feed_forward.w3.weight"); });
  expect_error(tokens_only(dir), {"layers.1.feed_forward.w3.weight", "missing"});
}

TEST_F(CliErrors, UnexpectedExtraTensor) {
  const fs::path dir = copy_model("c2i_f32");
  edit_weights(dir, [](auto& t) {
    t["extra.bias"] = HostTensor{DType::F32, {2}, std::vector<unsigned char>(8, 0)};
  });
  expect_error(tokens_only(dir), {"extra.bias", "unexpected"});
}

TEST_F(CliErrors, DtypeDisagreesWithConfig) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["gpt"]["dtype"] = "bf16"; });
  expect_error(tokens_only(dir), {"gpt.safetensors", "tensor '", "f32", "bf16"});
}

// ---- flags and values --------------------------------------------------------------------------

// A command line whose every argument beginning with "@/" is a fixture path ("@/c2i_f32") and
// "%/" a path in the test's scratch directory; the error must mention `needle`.
struct FlagCase {
  const char* name;
  std::vector<std::string> args;
  std::vector<std::string> needles;
};

class CliFlagErrors : public CliTest, public ::testing::WithParamInterface<FlagCase> {};

TEST_P(CliFlagErrors, ExitsWithOneErrorLine) {
  std::vector<std::string> args;
  for (const auto& a : GetParam().args) {
    if (a.rfind("@/", 0) == 0)
      args.push_back(fixture(a.substr(2)));
    else if (a.rfind("%/", 0) == 0)
      args.push_back(tmp(a.substr(2)));
    else
      args.push_back(a);
  }
  expect_error(args, GetParam().needles);
}

const std::vector<std::string> kGenC2i = {"generate", "-m", "@/c2i_f32", "--tokens-out", "%/t.npy"};
const std::vector<std::string> kGenT2i = {"generate", "-m", "@/t2i_f32", "--tokens-out", "%/t.npy"};
const std::vector<std::string> kFwdC2i = {"forward", "-m",           "@/c2i_f32", "--class",
                                          "1",       "--logits-out", "%/l.npy"};

const std::vector<std::string> kGenMar = {"generate", "-m", "@/../mar/target_f32", "--latents-out",
                                          "%/z.npy"};

std::vector<std::string> with(std::vector<std::string> base, const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

INSTANTIATE_TEST_SUITE_P(
    Cli, CliFlagErrors,
    ::testing::Values(
        FlagCase{"UnknownFlag", with(kGenC2i, {"--class", "3", "--bogus"}), {"--bogus"}},
        // Without -m, forward (like every command) uses the embedded emoji model.
        FlagCase{"DefaultModelClassOutOfRange",
                 {"forward", "--class", "5000", "--tokens", "1", "--logits-out", "/tmp/x.npy"},
                 {"class 5000", "[0, 870)"}},
        FlagCase{"MissingRequiredLogitsOut", {"forward", "-m", "@/c2i_f32"}, {"--logits-out"}},
        FlagCase{"NonNumericN", with(kGenC2i, {"--class", "3", "--n", "abc"}), {"--n", "abc"}},
        FlagCase{"ClassOutOfRange", with(kGenC2i, {"--class", "10"}), {"class 10", "[0, 10)"}},
        FlagCase{"ClassOnT2i", with(kGenT2i, {"--class", "1"}), {"--class", "--caption"}},
        FlagCase{"CaptionOnC2i",
                 with(kGenC2i, {"--caption", "@/golden/caption.npy"}),
                 {"caption.npy", "--class"}},
        FlagCase{"CaptionFileMissing", with(kGenT2i, {"--caption", "%/nope.npy"}), {"nope.npy"}},
        FlagCase{"NoConditionGiven", kGenC2i, {"--class"}},
        FlagCase{
            "ForwardTokenOutOfRange", with(kFwdC2i, {"--tokens", "3,999"}), {"999", "[0, 256)"}},
        FlagCase{"ForwardTokenNotInteger", with(kFwdC2i, {"--tokens", "3,x"}), {"'x'", "--tokens"}},
        FlagCase{"ForwardTooManyTokens",
                 with(kFwdC2i, {"--tokens", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16"}),
                 {"15", "16"}},
        FlagCase{"TopPZero", with(kGenC2i, {"--class", "3", "--top-p", "0"}), {"--top-p"}},
        FlagCase{"TemperatureNegative",
                 with(kGenC2i, {"--class", "3", "--temperature", "-1"}),
                 {"--temperature"}},
        FlagCase{"BatchZero", with(kGenC2i, {"--class", "3", "--batch", "0"}), {"--batch"}},
        // Without -o an image is named after its class, and bare `tessera` prints the help
        // (issue 39: test_cli_readme.cpp).
        FlagCase{"UnknownMethod",
                 with(kGenC2i, {"--class", "3", "--method", "hydra"}),
                 {"--method", "hydra", "cool-sd"}},
        FlagCase{"HawkWithoutHeads",
                 with(kGenC2i, {"--class", "3", "--method", "hawk"}),
                 {"hawk", "Hawk heads", "--draft DIR", "names no \"hawk\" companion"}},
        FlagCase{
            "HawkWithMedusaHeads",
            with(kGenC2i, {"--class", "3", "--method", "hawk", "--draft", "@/../spec/tiny_medusa"}),
            {"--method hawk", "Hawk's heads", "tiny_medusa", "a Medusa heads directory"}},
        FlagCase{"HawkHorizontalBeyondTheHeads",
                 with(kGenC2i, {"--class", "3", "--method", "hawk", "--draft",
                                "@/../spec/tiny_hawk", "--hawk-horizontal", "3"}),
                 {"--hawk-horizontal 3", "tiny_hawk has 2 horizontal heads"}},
        FlagCase{"HawkDynamicTree",
                 with(kGenC2i, {"--class", "3", "--method", "hawk", "--draft",
                                "@/../spec/tiny_hawk", "--tree", "dynamic"}),
                 {"--tree dynamic", "Hawk's heads draft static trees"}},
        FlagCase{"SdWithoutDraft", with(kGenC2i, {"--class", "3", "--method", "sd"}), {"--draft"}},
        FlagCase{
            "SjdWithDraft",
            with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft", "@/../spec/tiny_draft"}),
            {"sjd", "--method sd"}},
        FlagCase{"DraftMissing",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "%/nope"}),
                 {"nope"}},
        FlagCase{
            "DraftVocabularyMismatch",
            with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/../spec/micro_draft"}),
            {"--draft", "vocab_size 4", "256"}},
        FlagCase{"LanternDeltaOutOfRange",
                 with(kGenC2i, {"--class", "3", "--method", "lantern", "--lantern-delta", "2"}),
                 {"--lantern-delta"}},
        FlagCase{"LanternKTooLarge",
                 with(kGenC2i, {"--class", "3", "--method", "lantern", "--lantern-k", "300"}),
                 {"--lantern-k 300", "255"}},
        FlagCase{"TreeUnknown",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32", "--tree",
                                "bogus"}),
                 {"--tree", "bogus", "naive_extend_57"}},
        FlagCase{"TreeWithJacobiDrafts",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--tree", "mc_sim_7b_63"}),
                 {"--tree", "Jacobi drafts are chains"}},
        FlagCase{"TreeDynamicWithMedusa",
                 with(kGenC2i, {"--class", "3", "--method", "medusa", "--draft",
                                "@/../spec/tiny_medusa", "--tree", "dynamic"}),
                 {"--tree dynamic", "Medusa's heads draft static trees"}},
        FlagCase{"TreeDynamicNotANumber",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32", "--tree",
                                "dynamic:4,x,58"}),
                 {"--tree", "dynamic:4,x,58", "TOPK", "'x'"}},
        FlagCase{"TreeDynamicTwoNumbers",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32", "--tree",
                                "dynamic:4,10"}),
                 {"--tree", "dynamic:DEPTH,TOPK,TOTAL"}},
        FlagCase{"TreeDynamicTooManyNodes",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32", "--tree",
                                "dynamic:4,10,600"}),
                 {"--tree", "TOTAL", "1..512", "'600'"}},
        FlagCase{"TreeDynamicMoreThanItsCandidates",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32", "--tree",
                                "dynamic:1,2,7"}),
                 {"--tree", "TOTAL 7 exceeds the 6 candidates"}},
        FlagCase{"TreeDynamicTooDeep",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32", "--tree",
                                "dynamic:64,2,7"}),
                 {"--tree", "DEPTH", "0..63"}},
        FlagCase{"EagleDrafterForAnotherTarget",
                 with(kGenC2i,
                      {"--class", "3", "--method", "eagle", "--draft", "@/../spec/micro_eagle"}),
                 {"--draft", "micro_eagle", "width 32 is not the target's 64"}},
        FlagCase{
            "EagleWithADraftGpt",
            with(kGenC2i, {"--class", "3", "--method", "eagle", "--draft", "@/../spec/tiny_draft"}),
            {"--method eagle", "EAGLE drafter", "tiny_draft", "--method sd"}},
        FlagCase{"EagleWithoutACompanion",
                 with(kGenC2i, {"--class", "3", "--method", "eagle"}),
                 {"eagle", "--draft DIR", "no \"eagle\" companion"}},
        FlagCase{"MedusaHeadsForAnotherTarget",
                 with(kGenC2i,
                      {"--class", "3", "--method", "medusa", "--draft", "@/../spec/micro_medusa"}),
                 {"--draft", "micro_medusa", "width 32 is not the target's 64"}},
        FlagCase{"MedusaWithAnEagleDrafter",
                 with(kGenC2i, {"--class", "3", "--method", "medusa-typical", "--draft",
                                "@/../spec/tiny_eagle"}),
                 {"--method medusa-typical", "Medusa heads", "tiny_eagle", "EAGLE drafter"}},
        FlagCase{
            "MedusaHeadsForAnEagleMethod",  // sd, lantern, ... draft with them (Medusa + LANTERN++)
            with(kGenC2i,
                 {"--class", "3", "--method", "eagle", "--draft", "@/../spec/tiny_medusa"}),
            {"--draft", "tiny_medusa", "Medusa heads", "--method medusa"}},
        FlagCase{"MedusaWithoutACompanion",
                 with(kGenC2i, {"--class", "3", "--method", "medusa"}),
                 {"medusa", "--draft DIR", "no \"medusa\" companion"}},
        FlagCase{"MedusaTypicalEpsOutOfRange",
                 with(kGenC2i, {"--class", "3", "--method", "medusa-typical", "--draft",
                                "@/../spec/tiny_medusa", "--typical-eps", "2"}),
                 {"--typical-eps", "[0, 1]"}},
        FlagCase{"TreeWithVanilla",
                 with(kGenC2i, {"--class", "3", "--tree", "chain:3"}),
                 {"--tree", "drafts nothing"}},
        FlagCase{"ResampleUnknown",
                 with(kGenC2i, {"--class", "3", "--method", "cool-sd", "--resample", "best"}),
                 {"--resample", "best"}},
        FlagCase{"GsdEmbeddingUnknown",
                 with(kGenC2i, {"--class", "3", "--method", "gsd", "--gsd-embedding", "clip"}),
                 {"--gsd-embedding", "clip"}},
        FlagCase{"GsdGTooSmall",
                 with(kGenC2i, {"--class", "3", "--method", "gsd", "--gsd-g", "1"}),
                 {"--gsd-g must be >= 2"}},
        FlagCase{"CoolDeltaZero",
                 with(kGenC2i, {"--class", "3", "--method", "cool-sd", "--cool-delta", "0"}),
                 {"--cool-delta must be > 0"}},
        FlagCase{"LanternKNotAnInteger",
                 with(kGenC2i, {"--class", "3", "--method", "lantern", "--lantern-k", "2.5"}),
                 {"--lantern-k"}},
        FlagCase{"CspdMethodOnLlamaGen",
                 with(kGenC2i, {"--class", "3", "--method", "cspd"}),
                 {"--method", "cspd", "MAR"}},
        FlagCase{"JacobiWindowTooShort",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-len", "1"}),
                 {"--draft-len"}},
        FlagCase{"DraftLenNeitherAutoNorANumber",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-len", "often"}),
                 {"--draft-len", "auto", "often"}},
        FlagCase{"DraftCostsWithoutTheDraftStep",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-costs", "0.1,0.2"}),
                 {"--draft-costs", "'0.1,0.2'", "no ':'"}},
        FlagCase{"DraftCostsWithAWord",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-costs", "0:0.1,fast"}),
                 {"--draft-costs", "'fast' is not a number"}},
        FlagCase{"DraftCostsTooFew",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-costs", "0:0.1,0.2"}),
                 {"--draft-costs has 2 verification costs", "--draft-len auto", "needs"}},
        FlagCase{"DraftCostsNotPositive",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-costs",
                                "0:0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,"
                                "0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,"
                                "0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0.1,0"}),
                 {"--draft-costs has a verification cost that is not positive"}},
        FlagCase{"DraftCostsWithAFixedLength",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-len", "4",
                                "--draft-costs", "0:0.1"}),
                 {"--draft-costs", "--draft-len 4 is fixed"}},
        FlagCase{"DraftCostsWithVanilla",
                 with(kGenC2i, {"--class", "3", "--draft-costs", "0:0.1"}),
                 {"--draft-costs", "drafts nothing"}},
        FlagCase{"DraftHoldWithAFixedLength",
                 with(kGenC2i,
                      {"--class", "3", "--method", "sjd", "--draft-len", "4", "--draft-hold", "2"}),
                 {"--draft-hold", "--draft-len 4 is fixed"}},
        FlagCase{"DraftHoldWithVanilla",
                 with(kGenC2i, {"--class", "3", "--draft-hold", "2"}),
                 {"--draft-hold", "drafts nothing"}},
        FlagCase{"DraftHoldOutOfRange",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-hold", "0"}),
                 {"--draft-hold"}},
        FlagCase{"TuneDraftHoldWithSweptLengths",
                 {"tune", "-m", "@/c2i_f32", "--method", "lantern", "--draft-hold", "2"},
                 {"--draft-hold", "tune sweeps fixed lengths"}},
        FlagCase{"ServeDraftHoldWithAFixedLength",
                 {"serve", "-m", "@/c2i_f32", "--method", "sjd", "--draft-len", "4", "--draft-hold",
                  "2", "--port", "0"},
                 {"--draft-hold is what --draft-len auto holds its lengths for"}},
        FlagCase{"BenchDraftHoldWithVanilla",
                 {"bench", "-m", "@/c2i_f32", "--draft-hold", "2"},
                 {"--draft-hold applies to the methods of --methods"}},
        FlagCase{"BenchDraftHoldWithoutAuto",
                 {"bench", "-m", "@/c2i_f32", "--methods", "sjd", "--draft-lens", "3,4",
                  "--draft-hold", "2"},
                 {"--draft-hold", "no length of this bench is auto"}},
        FlagCase{"BenchDraftLensSweepWithAWord",
                 {"bench", "-m", "@/c2i_f32", "--methods", "sjd", "--draft-lens", "auto,x"},
                 {"--draft-lens", "'x'"}},
        FlagCase{"BenchMethodsWithTokens",
                 {"bench", "-m", "@/c2i_f32", "--methods", "sjd", "--tokens", "4"},
                 {"--tokens"}},
        FlagCase{"BenchRepeatZero",
                 {"bench", "-m", "@/c2i_f32", "--repeat", "0", "--tokens", "2"},
                 {"--repeat", "at least 1"}},
        FlagCase{"BenchAgainstWithMethods",
                 {"bench", "-m", "@/c2i_f32", "--methods", "sjd", "--against", "@/c2i_bf16"},
                 {"--against", "--methods"}},
        FlagCase{"BenchAgainstMissingModel",
                 {"bench", "-m", "@/c2i_f32", "--against", "@/nope", "--tokens", "2"},
                 {"nope"}},
        FlagCase{"BenchKernelsWithModelFlags",
                 {"bench", "--kernels", "-m", "@/c2i_f32", "--tokens", "2"},
                 {"does not apply to --kernels"}},
        // MAR model directories
        FlagCase{"MarClassOutOfRange", with(kGenMar, {"--class", "10"}), {"class 10", "[0, 10)"}},
        FlagCase{
            "MarCaption", with(kGenMar, {"--caption", "@/golden/caption.npy"}), {"MAR", "--class"}},
        FlagCase{
            "MarStepsTooMany", with(kGenMar, {"--class", "1", "--steps", "17"}), {"--steps", "17"}},
        FlagCase{"MarCfgSchedule",
                 with(kGenMar, {"--class", "1", "--cfg-schedule", "cosine"}),
                 {"--cfg-schedule", "cosine"}},
        FlagCase{"MarLlamaGenMethod",
                 with(kGenMar, {"--class", "1", "--method", "lantern"}),
                 {"--method", "lantern", "cspd-exact"}},
        FlagCase{"MarCspdWithoutDraft",
                 with(kGenMar, {"--class", "1", "--method", "cspd"}),
                 {"cspd", "--draft"}},
        FlagCase{"MarDraftNotMar",
                 with(kGenMar, {"--class", "1", "--method", "cspd", "--draft", "@/c2i_f32"}),
                 {"--draft", "not a MAR"}},
        FlagCase{"MarPrefillOutOfRange",
                 with(kGenMar, {"--class", "1", "--method", "cspd", "--draft", "@/../mar/draft_f32",
                                "--prefill", "1.5"}),
                 {"--prefill"}},
        FlagCase{"MarDraftCosts",
                 with(kGenMar, {"--class", "1", "--method", "cspd", "--draft", "@/../mar/draft_f32",
                                "--draft-costs", "0:0.1"}),
                 {"--draft-costs is for LlamaGen methods"}},
        FlagCase{"MarDraftHold",
                 with(kGenMar, {"--class", "1", "--method", "cspd", "--draft", "@/../mar/draft_f32",
                                "--draft-hold", "2"}),
                 {"--draft-hold is for LlamaGen methods"}},
        FlagCase{"MarTestStepOutOfRange",
                 with(kGenMar, {"--class", "1", "--method", "cspd-exact", "--draft",
                                "@/../mar/draft_f32", "--cspd-test-step", "0"}),
                 {"--cspd-test-step"}},
        FlagCase{"MarForwardWithoutZOut",
                 {"forward", "-m", "@/../mar/target_f32", "--class", "1"},
                 {"--z-out"}},
        FlagCase{"MarDecodeWrongShape",
                 {"decode", "-m", "@/../mar/target_f32", "--latents", "@/../mar/golden/diff_xT.npy",
                  "-o", "%/a.png"},
                 {"diff_xT.npy", "[n, 16, 16]"}}),
    [](const ::testing::TestParamInfo<FlagCase>& i) { return std::string(i.param.name); });

// ---- method flags, built from the registry (tessera/methods.h) --------------------------------

// The CLI's flag for a parameter: "lantern.k" -> --lantern-k.
std::string flag_of(const std::string& param) {
  std::string f = "--" + param;
  std::replace(f.begin(), f.end(), '.', '-');
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

TEST_F(CliOutput, EveryMethodAndParameterIsOnTheCommandLine) {
  for (const char* sub : {"generate", "bench"}) {
    const CliResult r = run({sub, "--help"});
    ASSERT_EQ(r.code, 0) << r.err;
    for (const MethodInfo& m : registered_methods()) {
      EXPECT_NE(r.out.find(m.name), std::string::npos) << sub << ": method " << m.name;
      for (const ParamInfo& p : m.params)
        EXPECT_NE(r.out.find("  " + flag_of(p.name) + " "), std::string::npos)
            << sub << ": " << flag_of(p.name) << " (" << m.name << ") missing from:\n"
            << r.out;
    }
  }
}

// Every value parameter of every method, given a value outside what it accepts (all numeric
// parameters have a lower bound; choices refuse an unknown word), fails with exit code 1 and one
// line "error: --<flag> ...".
TEST_F(CliErrors, RegistryFlagOutOfRangeNamesTheFlag) {
  int checked = 0;
  for (const MethodInfo& m : registered_methods()) {
    if (m.tokens == TokenKind::Any) continue;
    const bool mar = m.tokens == TokenKind::Continuous;
    std::vector<std::string> base =
        mar ? with(std::vector<std::string>{"generate", "-m", fixture("../mar/target_f32"),
                                            "--latents-out", tmp("z.npy"), "--class", "1"},
                   {"--draft", fixture("../mar/draft_f32")})
            : std::vector<std::string>{
                  "generate", "-m", fixture("c2i_f32"), "--tokens-out", tmp("t.npy"),
                  "--class",  "3"};
    if (!mar && m.drafts == DraftSource::DraftModel)  // the drafter the method drafts with
      base = with(base, {"--draft", fixture(m.drafter == "medusa"  ? "../spec/tiny_medusa"
                                            : m.drafter == "eagle" ? "../spec/tiny_eagle"
                                            : m.drafter == "hawk"  ? "../spec/tiny_hawk"
                                                                   : "../spec/tiny_draft")});
    for (const ParamInfo& p : m.params) {
      if (p.type == ParamType::Switch || (p.type != ParamType::Choice && p.range.empty()) ||
          p.range.rfind("<", 0) == 0)
        continue;  // no value is refused (switches), or no lower bound to go under
      const std::string flag = flag_of(p.name);
      const std::string bad = p.type == ParamType::Choice ? "no-such-choice" : "-1000000";
      const std::vector<std::string> args = with(base, {"--method", m.name, flag, bad});
      SCOPED_TRACE(m.name + " " + flag + " " + bad);
      const CliResult r = run(args);
      ASSERT_TRUE(r.exited) << r.err;
      EXPECT_EQ(r.code, 1) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_EQ(r.err.rfind("error: " + flag + " ", 0), 0u) << r.err;
      ++checked;
    }
  }
  EXPECT_GE(checked, 15);
}

// ---- caption and token files -------------------------------------------------------------------

class CliCaptionErrors : public CliTest {
 protected:
  // Writes a [rows, width] caption filled with `value` and expects the t2i model to refuse it.
  void expect_caption_error(int rows, int width, float value, const std::string& needle) {
    const std::vector<float> feats(static_cast<size_t>(rows) * width, value);
    const std::string path = tmp("caption.npy");
    write_npy(path, DType::F32, {rows, width}, feats.data());
    expect_error(
        {"generate", "-m", fixture("t2i_f32"), "--caption", path, "--tokens-out", tmp("t.npy")},
        {path, needle});
  }
};

TEST_F(CliCaptionErrors, WrongWidth) {
  expect_caption_error(8, 31, 0.5f, "width 31");
}
TEST_F(CliCaptionErrors, TooManyRows) {
  expect_caption_error(9, 32, 0.5f, "9 rows");
}
TEST_F(CliCaptionErrors, AllZero) {
  expect_caption_error(8, 32, 0.0f, "zero");
}

class CliDecodeErrors : public CliTest {
 protected:
  void expect_decode_error(const std::string& tokens_file,
                           const std::vector<std::string>& needles) {
    std::vector<std::string> all = needles;
    all.push_back(tokens_file);
    expect_error({"decode", "-m", fixture("c2i_f32"), "--tokens", tokens_file, "-o", tmp("d.png")},
                 all);
    EXPECT_FALSE(fs::exists(tmp("d.png")));
  }
};

TEST_F(CliDecodeErrors, TokenOutOfRange) {
  std::vector<int32_t> ids(16, 7);
  ids[5] = 300;
  write_npy(tmp("tok.npy"), DType::I32, {4, 4}, ids.data());
  expect_decode_error(tmp("tok.npy"), {"300"});
}

TEST_F(CliDecodeErrors, WrongShape) {
  const std::vector<int32_t> ids(9, 1);
  write_npy(tmp("tok.npy"), DType::I32, {3, 3}, ids.data());
  expect_decode_error(tmp("tok.npy"), {"[3, 3]"});
}

TEST_F(CliDecodeErrors, FloatDtype) {
  const std::vector<float> ids(16, 1.0f);
  write_npy(tmp("tok.npy"), DType::F32, {4, 4}, ids.data());
  expect_decode_error(tmp("tok.npy"), {"f32"});
}

TEST_F(CliDecodeErrors, NotAnNpyFile) {
  spit(tmp("tok.npy"), "3,4,5\n");
  expect_decode_error(tmp("tok.npy"), {"not a .npy"});
}

// ---- a model directory without the VQ decoder ---------------------------------------------------

TEST_F(CliErrors, PngFromModelWithoutVq) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j.erase("vq"); });
  expect_error({"generate", "-m", dir.string(), "--class", "3", "-o", tmp("x.png")},
               {"VQ decoder", "--tokens-out"});
  EXPECT_FALSE(fs::exists(tmp("x.png")));
  expect_error({"decode", "-m", dir.string(), "--tokens", fixture("golden/vq_tokens.npy"), "-o",
                tmp("d.png")},
               {"VQ decoder"});
}

// A path that cannot be written is a bad input too: one error line, no half-finished output.
// (Checked before any work is done, so no progress/info line precedes the error.)
TEST_F(CliErrors, UnwritableOutputPath) {
  expect_error(with({"generate", "-m", fixture("c2i_f32"), "--class", "3"},
                    {"--tokens-out", tmp("no_dir/t.npy")}),
               {"no_dir/t.npy"});
  expect_error(
      with({"generate", "-m", fixture("c2i_f32"), "--class", "3"}, {"-o", tmp("no_dir/x.png")}),
      {"no_dir/x.png"});
}

TEST_F(CliOutput, TokensFromModelWithoutVq) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j.erase("vq"); });
  fs::remove(dir / "vq.safetensors");
  const CliResult r = run({"generate", "-m", dir.string(), "--class", "3", "--n", "2", "-q",
                           "--tokens-out", tmp("t.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  const NpyArray a = read_npy(tmp("t.npy"));
  EXPECT_EQ(a.shape, (Shape{2, 4, 4}));
  for (int32_t t : a.as_i32()) EXPECT_TRUE(t >= 0 && t < 256) << t;
}

// ---- --device ----------------------------------------------------------------------------------

// Every command that loads a model refuses a CUDA device this build lacks before any work: one
// line naming the device and how to get one, a non-zero exit.
TEST_F(CliErrors, DeviceCudaThisProcessCannotUse) {
  // The CPU build: how to get the backend; a CUDA build without a GPU: none found; with a GPU:
  // an ordinal past the last.
  std::string why;
  const auto devs = cuda_devices(&why);
  std::vector<std::string> devices = {"cuda", "cuda:1"};
  std::vector<std::string> says = {"this build of tessera has no CUDA backend",
                                   "-DTESSERA_CUDA=ON"};
  if (cuda_built() && devs.empty()) says = {"no CUDA device found (" + why + ")"};
  if (!devs.empty()) {
    devices = {"cuda:99"};
    says = {"this machine has " + std::to_string(devs.size()) + " CUDA device"};
  }
  const std::string mar = fixture("../mar/target_f32");
  const std::vector<std::vector<std::string>> commands = {
      {"generate", "-m", fixture("c2i_f32"), "--class", "3", "--tokens-out", tmp("t.npy")},
      {"generate", "-m", mar, "--class", "1", "--latents-out", tmp("z.npy")},
      {"bench", "-m", fixture("c2i_f32")},
      {"bench", "-m", fixture("c2i_f32"), "--methods", "sjd"},
      {"bench", "-m", mar},
      {"tune", "-m", fixture("c2i_f32"), "--method", "lantern"},
      {"forward", "-m", fixture("c2i_f32"), "--class", "1", "--logits-out", tmp("l.npy")},
      {"decode", "-m", fixture("c2i_f32"), "--tokens", fixture("golden/vq_tokens.npy"), "-o",
       tmp("d.png")}};
  for (const std::string& dev : devices)
    for (const auto& c : commands) {
      std::vector<std::string> expected = says;
      expected.front() = "--device " + dev + ": " + expected.front();
      expect_error(with(c, {"--device", dev}), expected);
    }
  EXPECT_FALSE(fs::exists(tmp("t.npy")));
}

TEST_F(CliErrors, DeviceNotADevice) {
  for (const std::string dev : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CPU", "cuda:0:1"})
    expect_error(with(kGenC2i, {"--class", "3", "--device", dev}),
                 {"--device " + dev + ": not a device", "cpu, cuda, cuda:N"});
}

// --device cpu is the default: the same tokens, bit for bit.
TEST_F(CliOutput, DeviceCpuIsTheDefault) {
  const auto gen = [&](const std::string& out, std::vector<std::string> more) {
    std::vector<std::string> a = {"generate",     "-m",    fixture("c2i_f32"), "--class", "3",
                                  "--tokens-out", tmp(out)};
    a.insert(a.end(), more.begin(), more.end());
    return run(a);
  };
  ASSERT_EQ(gen("a.npy", {}).code, 0);
  const CliResult r = gen("b.npy", {"--device", "cpu", "-v"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("threads, device cpu"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(tmp("a.npy")), slurp(tmp("b.npy")));
}

TEST_F(CliOutput, DevicesListsTheCpuAndWhyNoGpu) {
  const CliResult r = run({"devices"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("cpu\n", 0), 0u) << r.out;
  std::string why;
  const auto devs = cuda_devices(&why);
  if (!cuda_built()) {
    EXPECT_NE(r.out.find("no CUDA device: this build of tessera has no CUDA backend"),
              std::string::npos)
        << r.out;
  } else if (devs.empty()) {
    EXPECT_NE(r.out.find("no CUDA device: " + why), std::string::npos) << r.out;
  } else {
    EXPECT_NE(r.out.find(devs.front().name), std::string::npos) << r.out;
  }
}

// ---- good paths ------------------------------------------------------------------------------

TEST_F(CliOutput, HelpListsSubcommands) {
  const CliResult r = run({"--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  for (const char* sub : {"generate", "forward", "decode", "bench"})
    EXPECT_NE(r.out.find(sub), std::string::npos) << sub << " missing from:\n" << r.out;
}

TEST_F(CliOutput, SubcommandHelp) {
  for (const char* sub : {"generate", "forward", "decode", "bench"}) {
    const CliResult r = run({sub, "--help"});
    EXPECT_EQ(r.code, 0) << sub << ": " << r.err;
    EXPECT_NE(r.out.find("--model"), std::string::npos) << sub << ":\n" << r.out;
  }
}

std::string png_parameters(const std::string& path, int& w, int& h) {
  std::vector<std::pair<std::string, std::string>> text;
  read_png(path, w, h, &text);
  for (const auto& [k, v] : text)
    if (k == "parameters") return v;
  ADD_FAILURE() << path << " has no 'parameters' text chunk";
  return "";
}

TEST_F(CliOutput, GenerateNumbersImages) {
  const CliResult r = run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--n", "2",
                           "--seed", "1", "-o", tmp("x.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(tmp("x.png")));
  for (const char* name : {"x_0000.png", "x_0001.png"}) {
    ASSERT_TRUE(fs::exists(tmp(name))) << name;
    int w = 0, h = 0;
    const std::string params = png_parameters(tmp(name), w, h);
    EXPECT_EQ(w, 16);
    EXPECT_EQ(h, 16);
    EXPECT_NE(params.find("seed=1"), std::string::npos) << params;
    EXPECT_NE(params.find("class=3"), std::string::npos) << params;
    const std::string index = std::string("image_index=") + (name[5] == '1' ? "1" : "0");
    EXPECT_NE(params.find(index), std::string::npos) << params;
  }
}

// config.json "sampling": the model's settings apply where no flag is given; a flag wins.
TEST_F(CliOutput, ModelSamplingDefaultsApplyUnlessAFlagIsGiven) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) {
    j["sampling"] = {{"cfg", 1.5}, {"temperature", 0.5}, {"top_k", 7}, {"top_p", 0.9}};
  });
  const CliResult r = run({"generate", "-m", dir.string(), "--class", "3", "--seed", "1", "--top-k",
                           "3", "-o", tmp("d.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("the model's sampling settings (config.json): cfg 1.5, temperature 0.5, "
                       "top-p 0.9"),
            std::string::npos)
      << r.err;
  int w = 0, h = 0;
  const std::string params = png_parameters(tmp("d.png"), w, h);
  for (const char* want : {"cfg=1.5;", "temperature=0.5;", "top_k=3;", "top_p=0.9;"})
    EXPECT_NE(params.find(want), std::string::npos) << want << " in " << params;
  // The same settings given as flags draw the same tokens: the defaults are plain flag values.
  const CliResult a = run({"generate", "-m", dir.string(), "--class", "3", "--seed", "1", "--top-k",
                           "3", "--tokens-out", tmp("a.npy")});
  const CliResult b =
      run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--seed", "1", "--cfg", "1.5",
           "--temperature", "0.5", "--top-k", "3", "--top-p", "0.9", "--tokens-out", tmp("b.npy")});
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(slurp(tmp("a.npy")), slurp(tmp("b.npy")));
}

// bench times the workload generate would run: the model's sampling settings unless flags given.
TEST_F(CliOutput, BenchUsesModelSamplingDefaults) {
  const fs::path dir = copy_model("c2i_f32");
  edit_config(dir, [](nlohmann::json& j) { j["sampling"] = {{"cfg", 1.5}, {"top_k", 7}}; });
  const CliResult v = run({"bench", "-m", dir.string(), "--tokens", "2", "--json", "--quiet"});
  ASSERT_EQ(v.code, 0) << v.err;
  auto j = nlohmann::json::parse(v.out);
  EXPECT_DOUBLE_EQ(j["cfg"].get<double>(), 1.5);
  EXPECT_EQ(j["top_k"], 7);
  const CliResult f =
      run({"bench", "-m", dir.string(), "--tokens", "2", "--cfg", "3", "--json", "--quiet"});
  ASSERT_EQ(f.code, 0) << f.err;
  j = nlohmann::json::parse(f.out);
  EXPECT_DOUBLE_EQ(j["cfg"].get<double>(), 3.0);
  EXPECT_EQ(j["top_k"], 7);
  const CliResult m =
      run({"bench", "-m", dir.string(), "--methods", "sjd", "--top-k", "5", "--json", "--quiet"});
  ASSERT_EQ(m.code, 0) << m.err;
  j = nlohmann::json::parse(m.out);
  EXPECT_DOUBLE_EQ(j["cfg"].get<double>(), 1.5);
  EXPECT_EQ(j["top_k"], 5);
}

TEST_F(CliOutput, GenerateGridWritesOnePng) {
  const CliResult r = run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--n", "2",
                           "--seed", "1", "--grid", "-o", tmp("g.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<fs::path> pngs;
  for (const auto& e : fs::directory_iterator(tmp_))
    if (e.path().extension() == ".png") pngs.push_back(e.path());
  ASSERT_EQ(pngs.size(), 1u);
  EXPECT_EQ(pngs[0].filename(), "g.png");
  int w = 0, h = 0;
  const std::string params = png_parameters(tmp("g.png"), w, h);
  EXPECT_EQ(w, 2 * (16 + 2) + 2);  // two 16-px tiles with 2-px padding
  EXPECT_EQ(h, 16 + 2 + 2);
  EXPECT_NE(params.find("seed=1"), std::string::npos) << params;
}

TEST_F(CliOutput, QuietMeansSilentStderr) {
  const CliResult r = run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--seed", "1",
                           "--quiet", "-o", tmp("q.png"), "--tokens-out", tmp("q.npy")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_TRUE(fs::exists(tmp("q.png")));
  EXPECT_TRUE(fs::exists(tmp("q.npy")));
}

TEST_F(CliOutput, SpeculativeGenerateWritesStatsAndHeatmap) {
  const std::string draft = (kFixtures / ".." / "spec" / "tiny_draft").string();
  const CliResult r =
      run({"generate", "-m", fixture("c2i_f32"), "--class", "3", "--n", "2", "--method", "cool-sd",
           "--draft", draft, "--draft-len", "3", "-o", tmp("x.png"), "--stats-out", tmp("s.json"),
           "--heatmap-out", tmp("h.png")});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(tmp("s.json")));
  EXPECT_EQ(j["method"], "cool-sd");
  EXPECT_EQ(j["images"], 2);
  EXPECT_EQ(j["tokens"], 32);
  ASSERT_EQ(j["per_image"].size(), 2u);
  for (const auto& im : j["per_image"]) {
    EXPECT_EQ(im["tokens"], 16);
    EXPECT_EQ(im["target_forwards"].get<int>(), im["rounds"].get<int>() + 1);
    EXPECT_GT(im["draft_forwards"].get<int>(), 0);
    EXPECT_GE(im["mean_accepted_length"].get<double>(), 1.0);
  }
  int w = 0, h = 0;
  const std::string params = png_parameters(tmp("x_0001.png"), w, h);
  EXPECT_NE(params.find("method=cool-sd"), std::string::npos) << params;
  for (const char* name : {"h_0000.png", "h_0001.png"}) {
    const std::string desc = png_parameters(tmp(name), w, h);
    EXPECT_EQ(w, 256);  // 4x4 grid, 64-px cells
    EXPECT_EQ(h, 256);
  }
}

TEST_F(CliOutput, BenchComparesMethodsAgainstVanilla) {
  const std::string draft = (kFixtures / ".." / "spec" / "tiny_draft").string();
  const CliResult r = run({"bench", "-m", fixture("c2i_f32"), "--methods", "sd,sjd,uniform-rsd",
                           "--draft", draft, "-n", "2", "--json", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["methods"].size(), 4u);
  EXPECT_EQ(j["methods"][0]["method"], "vanilla");
  EXPECT_DOUBLE_EQ(j["methods"][0]["speedup_vs_vanilla"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["methods"][0]["mean_accepted_length"].get<double>(), 1.0);
  EXPECT_EQ(j["methods"][1]["method"], "sd");
  EXPECT_GT(j["methods"][1]["batched_draft_forwards"].get<int>(), 0);
  EXPECT_EQ(j["methods"][2]["batched_draft_forwards"].get<int>(), 0);  // sjd: no draft model
  for (const auto& m : j["methods"]) EXPECT_GT(m["speedup_vs_vanilla"].get<double>(), 0.0);
}

// Two models timed in alternating rounds: per-model medians and the median of per-round ratios.
TEST_F(CliOutput, BenchAgainstReportsPairedRatio) {
  const CliResult r = run({"bench", "-m", fixture("c2i_f32"), "--against", fixture("c2i_bf16"),
                           "--tokens", "4", "--repeat", "3", "--json", "--quiet"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["rounds"], 3);
  EXPECT_EQ(j["weights_dtype"], "f32");
  EXPECT_EQ(j["against"]["weights_dtype"], "bf16");
  const auto a = j["tokens_per_s_rounds"].get<std::vector<double>>();
  const auto b = j["against"]["tokens_per_s_rounds"].get<std::vector<double>>();
  auto ratios = j["ratio_rounds"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  ASSERT_EQ(ratios.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(ratios[i], a[i] / b[i], 1e-9 * ratios[i]);
  std::sort(ratios.begin(), ratios.end());
  EXPECT_DOUBLE_EQ(j["tokens_per_s_ratio_vs_against"].get<double>(), ratios[1]);
  auto sorted_a = a;
  std::sort(sorted_a.begin(), sorted_a.end());
  EXPECT_DOUBLE_EQ(j["tokens_per_s"].get<double>(), sorted_a[1]);  // the median round's figures
  EXPECT_GT(j["against"]["weight_bytes_per_step"].get<double>(), 0.0);
  EXPECT_LT(j["against"]["weight_bytes_per_step"].get<double>(),
            j["weight_bytes_per_step"].get<double>());  // bf16 streams fewer bytes than f32
}

// ---- prompts (classes.json) and the default model --------------------------------------------

// The c2i fixture (10 classes) named as 5 emoji in 2 styles; class = emoji * 2 + style.
class CliPrompt : public CliTest {
 protected:
  void SetUp() override {
    CliTest::SetUp();
    model_ = (tmp_ / "models" / "emoji" / "target");
    fs::create_directories(model_.parent_path());
    fs::copy(kFixtures / "c2i_f32", model_, fs::copy_options::recursive);
    nlohmann::json classes = {{"styles", {"twitter", "google"}},
                              {"classes", nlohmann::json::array()}};
    for (const char* name : {"red apple", "green apple", "grinning face", "cat face", "rocket"})
      for (const char* style : {"twitter", "google"})
        classes["classes"].push_back({{"name", name}, {"style", style}, {"category", "test"}});
    classes["aliases"] = {{"red apple", {"apple"}}};
    spit(model_ / "classes.json", classes.dump());
  }
  std::string env() const { return "TESSERA_DEFAULT_MODEL=" + shell_quote(model_.string()); }
  fs::path model_;
};

TEST_F(CliPrompt, MatchesAPromptAndNamesTheOutputAfterIt) {
  const CliResult r = run({"generate", "apple", "--style", "google", "--seed", "2"},
                          "cd " + shell_quote(tmp_.string()) + " && " + env());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("-> class 1: red apple (google)"), std::string::npos) << r.err;
  const std::string png = tmp("red_apple_google.png");
  EXPECT_NE(r.err.find("wrote red_apple_google.png"), std::string::npos) << r.err;
  ASSERT_TRUE(fs::exists(png));
  int w = 0, h = 0;
  const std::string params = png_parameters(png, w, h);
  EXPECT_NE(params.find("class=1; prompt=apple; style=google;"), std::string::npos) << params;
}

TEST_F(CliPrompt, SamePromptSameSeedSameTokensAsTheClass) {
  ASSERT_EQ(run({"generate", "-m", model_.string(), "rocket", "--seed", "5", "--tokens-out",
                 tmp("p.npy")})
                .code,
            0);
  ASSERT_EQ(run({"generate", "-m", model_.string(), "--class", "8", "--seed", "5", "--tokens-out",
                 tmp("c.npy")})
                .code,
            0);
  EXPECT_EQ(slurp(tmp("p.npy")), slurp(tmp("c.npy")));
}

TEST_F(CliPrompt, ClassesListsAndFilters) {
  const CliResult r = run({"classes", "apple", "--style", "twitter"}, env());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("red apple"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("green apple"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rocket"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("google"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
}

TEST_F(CliPrompt, BadPromptsFailWithOneLine) {
  const std::string e = env();
  auto expect = [&](const std::vector<std::string>& args, const std::vector<std::string>& needles) {
    std::string shown;
    for (const auto& a : args) shown += " " + a;
    SCOPED_TRACE("tessera" + shown);
    const CliResult r = run(args, e);
    ASSERT_TRUE(r.exited);
    EXPECT_NE(r.code, 0);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_EQ(r.err.rfind("error:", 0), 0u) << r.err;
    for (const auto& n : needles) EXPECT_NE(r.err.find(n), std::string::npos) << r.err;
  };
  expect({"generate", "submarine", "-o", tmp("x.png")}, {"no emoji named 'submarine'", "closest"});
  expect({"generate", "face", "-o", tmp("x.png")},
         {"matches 2 emoji", "'grinning face'", "'cat face'"});
  expect({"generate", "apple", "--style", "openmoji", "-o", tmp("x.png")},
         {"unknown style 'openmoji'"});
  expect({"generate", "apple", "--class", "1", "-o", tmp("x.png")}, {"not both"});
  expect({"generate", "--style", "google", "-o", tmp("x.png")}, {"--style", "prompt"});
  expect({"generate", "-o", tmp("x.png")}, {"give a prompt"});
  expect({"generate", "-m", fixture("c2i_f32"), "apple", "-o", tmp("x.png")}, {"no classes.json"});
  expect({"classes", "-m", fixture("c2i_f32")}, {"no classes.json"});
}

TEST_F(CliPrompt, NoDefaultModelIsAClearError) {
  const CliResult r =
      run({"generate", "apple"}, "TESSERA_DEFAULT_MODEL=" + shell_quote(tmp("none")));
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("has no config.json"), std::string::npos) << r.err;
}

}  // namespace

// ---- issue 21: values that are in range for the parser but not for the run ---------------------

// Finite-looking flags that are not finite, draft lengths longer than the image: each is one error
// line naming the flag and its allowed range.
INSTANTIATE_TEST_SUITE_P(
    CliRanges, CliFlagErrors,
    ::testing::Values(
        FlagCase{
            "CfgInfinite", with(kGenC2i, {"--class", "3", "--cfg", "inf"}), {"--cfg", "finite"}},
        FlagCase{"CfgNan", with(kGenC2i, {"--class", "3", "--cfg", "nan"}), {"--cfg", "finite"}},
        FlagCase{"TemperatureInfinite",
                 with(kGenC2i, {"--class", "3", "--temperature", "inf"}),
                 {"--temperature", "finite"}},
        FlagCase{
            "TopPNan", with(kGenC2i, {"--class", "3", "--top-p", "nan"}), {"--top-p", "(0, 1]"}},
        FlagCase{"CfgIntervalNan",
                 with(kGenC2i, {"--class", "3", "--cfg-interval", "nan"}),
                 {"--cfg-interval", "finite"}},
        FlagCase{"MethodParamInfinite",
                 with(kGenC2i, {"--class", "3", "--method", "lantern", "--lantern-delta", "inf"}),
                 {"--lantern-delta", "finite"}},
        // The fixture's image has 16 tokens: a Jacobi window spans at most 16 positions, a draft
        // model drafts at most the 15 after the root.
        FlagCase{"JacobiDraftLenLongerThanTheImage",
                 with(kGenC2i, {"--class", "3", "--method", "sjd", "--draft-len", "1000000000"}),
                 {"--draft-len", "[2, 16]", "16 tokens"}},
        FlagCase{"DraftModelDraftLenLongerThanTheImage",
                 with(kGenC2i, {"--class", "3", "--method", "sd", "--draft", "@/c2i_f32",
                                "--draft-len", "16"}),
                 {"--draft-len", "[1, 15]"}},
        FlagCase{"NegativeThreads", with(kGenC2i, {"--class", "3", "-t", "-2"}), {"--threads"}}),
    [](const auto& info) { return std::string(info.param.name); });

namespace {

// Wall-clock seconds of a CLI run (every run here is bounded by `timeout`).
template <class F>
double timed(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Overwrites element `index` of tensor `name` (an f16 or f32 tensor) of a safetensors file in
// place with a NaN or +Inf bit pattern.
void poison_tensor(const fs::path& file, const std::string& name, int64_t index, bool nan) {
  int64_t offset = 0;
  DType dtype;
  {
    const SafeTensorsFile f = SafeTensorsFile::open(file.string());
    const SafeTensorInfo& t = f.get(name);
    dtype = t.dtype;
    offset = static_cast<const unsigned char*>(t.data) - f.mapping()->data() +
             index * static_cast<int64_t>(dtype_size(t.dtype));
  }
  std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
  io.seekp(offset);
  if (dtype == DType::F16) {
    const uint16_t v = nan ? 0x7e00 : 0x7c00;
    io.write(reinterpret_cast<const char*>(&v), 2);
  } else {
    ASSERT_EQ(dtype, DType::F32);
    const uint32_t v = nan ? 0x7fc00000u : 0x7f800000u;
    io.write(reinterpret_cast<const char*>(&v), 4);
  }
  ASSERT_TRUE(io.good());
}

const fs::path kEmojiTarget = fs::path(TESSERA_SOURCE_DIR) / "models" / "emoji" / "target";

}  // namespace

class CliBadInput : public CliTest {
 protected:
  // A copy of the shipped emoji model that a test may corrupt (41 MB; copied, not linked).
  fs::path copy_emoji() const {
    const fs::path dst = tmp_ / "emoji";
    fs::create_directories(dst);
    for (const char* f : {"config.json", "gpt.safetensors", "vq.safetensors", "classes.json"})
      fs::copy_file(kEmojiTarget / f, dst / f);
    return dst;
  }
  // Runs under `timeout 30`: a hang shows up as exit code 124, never as a stuck test.
  CliResult run_bounded(const std::vector<std::string>& args, double* seconds = nullptr) const {
    CliResult r;
    const double s = timed([&] { r = run(args, "timeout 30"); });
    if (seconds) *seconds = s;
    EXPECT_NE(r.code, 124) << "timed out: " << r.err;
    return r;
  }
  void expect_one_error_line(const CliResult& r, const std::vector<std::string>& needles) const {
    ASSERT_TRUE(r.exited) << "killed by a signal; stderr: " << r.err;
    EXPECT_NE(r.code, 0) << r.err;
    const auto last = r.err.rfind("error:");
    ASSERT_NE(last, std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n', last), r.err.size() - 1) << "error must be the last line: " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n') -
                  std::count(r.err.begin(), r.err.begin() + last, '\n'),
              1);
    for (const auto& n : needles)
      EXPECT_NE(r.err.find(n, last), std::string::npos) << "expected '" << n << "' in: " << r.err;
  }
};

// A NaN or Inf in any weight is found at load and named; with the scan turned off (unsafe), the
// NaN reaches the logits and the run stops at the first token instead of writing a noise image.
TEST_F(CliBadInput, NonFiniteWeightsNameTheTensor) {
  const fs::path dir = copy_emoji();
  poison_tensor(dir / "gpt.safetensors", "output.weight", 12345, /*nan=*/true);
  const std::vector<std::string> args = {"generate", "-m", dir.string(), "--class",
                                         "3",        "-o", tmp("x.png")};
  expect_one_error_line(run_bounded(args), {"gpt.safetensors", "'output.weight'", "NaN or Inf"});
  EXPECT_FALSE(fs::exists(tmp("x.png")));

  std::vector<std::string> unchecked = args;
  unchecked.push_back("--no-check-weights");
  expect_one_error_line(run_bounded(unchecked), {"non-finite logits", "image token 0"});
  EXPECT_FALSE(fs::exists(tmp("x.png")));

  const fs::path dir2 = copy_model("c2i_f32");  // an Inf in a norm weight of an f32 model
  poison_tensor(dir2 / "gpt.safetensors", "norm.weight", 3, /*nan=*/false);
  expect_one_error_line(run_bounded(tokens_only(dir2)), {"'norm.weight'", "element 3"});
  EXPECT_FALSE(fs::exists(tmp("t.npy")));
}

TEST_F(CliBadInput, VqDecoderWeightsAreCheckedToo) {
  const fs::path dir = copy_emoji();
  poison_tensor(dir / "vq.safetensors", "quantize.embedding.weight", 0, /*nan=*/true);
  expect_one_error_line(
      run_bounded({"generate", "-m", dir.string(), "--class", "3", "-o", tmp("x.png")}),
      {"vq.safetensors", "'quantize.embedding.weight'"});
  EXPECT_FALSE(fs::exists(tmp("x.png")));
}

// An absurd thread count used to crash libgomp (SIGSEGV): it is clamped, with a note.
TEST_F(CliBadInput, AbsurdThreadCountIsClampedWithANote) {
  const CliResult r = run_bounded(with(tokens_only(kFixtures / "c2i_f32"), {"-t", "100000"}));
  ASSERT_TRUE(r.exited) << r.err;
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("note: 100000 threads requested"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(tmp("t.npy")));
}

// A batch whose KV cache cannot fit is refused before anything is allocated (never a kill by the
// OOM killer after minutes), naming the flag.
TEST_F(CliBadInput, BatchThatCannotFitInMemoryIsRefusedUpFront) {
  double seconds = 0.0;
  const CliResult r = run_bounded({"generate", "-m", kEmojiTarget.string(), "--class", "3", "-n",
                                   "20000", "-b", "20000", "--tokens-out", tmp("t.npy")},
                                  &seconds);
  expect_one_error_line(r, {"not enough memory", "KV cache", "lower --batch"});
  EXPECT_LT(seconds, 20.0);
  EXPECT_FALSE(fs::exists(tmp("t.npy")));
}

// Opening a model file never blocks: a FIFO (or a directory) in place of a weights or config file
// is an error naming it, within a few seconds.
TEST_F(CliBadInput, FifoOrDirectoryInsteadOfAModelFileFailsFast) {
  for (const char* file : {"gpt.safetensors", "config.json", "vq.safetensors"}) {
    for (const bool fifo : {true, false}) {
      SCOPED_TRACE(std::string(file) + (fifo ? " as a FIFO" : " as a directory"));
      const fs::path dir = copy_model("c2i_f32");
      fs::remove(dir / file);
      if (fifo)
        ASSERT_EQ(::mkfifo((dir / file).c_str(), 0600), 0);
      else
        fs::create_directory(dir / file);
      double seconds = 0.0;
      const CliResult r = run_bounded(
          {"generate", "-m", dir.string(), "--class", "3", "-o", tmp("x.png")}, &seconds);
      expect_one_error_line(r, {file});
      EXPECT_LT(seconds, 10.0);
      EXPECT_FALSE(fs::exists(tmp("x.png")));
      fs::remove_all(dir);
    }
  }
}

TEST_F(CliBadInput, FifoAsTokensInputFailsFast) {
  ASSERT_EQ(::mkfifo(tmp("tokens.npy").c_str(), 0600), 0);
  double seconds = 0.0;
  const CliResult r = run_bounded(
      {"decode", "-m", fixture("c2i_f32"), "--tokens", tmp("tokens.npy"), "-o", tmp("x.png")},
      &seconds);
  expect_one_error_line(r, {"tokens.npy"});
  EXPECT_LT(seconds, 10.0);
  EXPECT_FALSE(fs::exists(tmp("x.png")));
}
