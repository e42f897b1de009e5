// Every file tessera reads is validated: special files are refused without blocking, corrupt or
// crafted contents give a tessera::Error that names the problem, and the fuzz corpus and every
// input a fuzzer ever crashed on (tests/fuzz/regressions) go through the readers cleanly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.h"
#include "io/mapped_file.h"
#include "io/npy.h"
#include "io/png_reader.h"
#include "io/regular_file.h"
#include "io/safetensors.h"
#include "tessera/class_names.h"
#include "tessera/config.h"
#include "tessera/error.h"
#include "tessera/image_io.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

const fs::path kFuzz = fs::path(TESSERA_SOURCE_DIR) / "tests" / "fuzz";
const fs::path kFixtures = TESSERA_FIXTURES;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// The message of the tessera::Error that f throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

class Robustness : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("tessera_robust_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }

  // A safetensors file from its header text and data size.
  std::string safetensors(const std::string& name, const std::string& header, size_t data) {
    spit(tmp(name), le64(header.size()) + header + std::string(data, '\x01'));
    return tmp(name);
  }

  fs::path dir_;
};

// ---- special files: refused at once, never waited on ------------------------------------------

// Runs `open` on a path that is a FIFO; it must throw an Error naming the path as a FIFO within
// 2 s. Should it block anyway, opening the FIFO's write end releases it, so the test fails rather
// than hangs.
void expect_fifo_refused(const std::string& fifo, const std::function<void()>& open) {
  auto result = std::async(std::launch::async, [&] { return error_of(open); });
  if (result.wait_for(std::chrono::seconds(2)) != std::future_status::ready) {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    ADD_FAILURE() << "opening the FIFO " << fifo << " blocked";
    result.wait();
    if (fd >= 0) ::close(fd);
    return;
  }
  const std::string msg = result.get();
  EXPECT_CONTAINS(msg, fifo);
  EXPECT_CONTAINS(msg, "FIFO");
}

TEST_F(Robustness, FifoAsAnyInputIsRefusedWithoutBlocking) {
  const std::string fifo = tmp("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  expect_fifo_refused(fifo, [&] { SafeTensorsFile::open(fifo); });
  expect_fifo_refused(fifo, [&] { read_npy(fifo); });
  expect_fifo_refused(fifo, [&] {
    int w, h;
    read_png(fifo, w, h);
  });
  expect_fifo_refused(fifo, [&] { read_small_file(fifo, 100); });

  // config.json and classes.json of a model directory.
  const fs::path model = dir_ / "model";
  fs::create_directories(model);
  ASSERT_EQ(::mkfifo((model / "config.json").c_str(), 0600), 0);
  expect_fifo_refused((model / "config.json").string(), [&] { load_model_config(model.string()); });
  ASSERT_EQ(::mkfifo((model / "classes.json").c_str(), 0600), 0);
  expect_fifo_refused((model / "classes.json").string(),
                      [&] { ClassNames::load(model.string(), 1); });
}

TEST_F(Robustness, DirectoriesDevicesAndSocketsAreRefused) {
  for (const std::string& path : {tmp(""), std::string("/dev/null")}) {
    SCOPED_TRACE(path);
    const char* kind = path == "/dev/null" ? "character device" : "is a directory";
    int w, h;
    for (const std::string& msg :
         {error_of([&] { SafeTensorsFile::open(path); }), error_of([&] { read_npy(path); }),
          error_of([&] { read_png(path, w, h); }), error_of([&] { read_small_file(path, 10); })}) {
      EXPECT_CONTAINS(msg, path);
      EXPECT_CONTAINS(msg, kind);
    }
  }
  // A directory where config.json should be.
  fs::create_directories(dir_ / "m" / "config.json");
  const std::string msg = error_of([&] { load_model_config((dir_ / "m").string()); });
  EXPECT_CONTAINS(msg, "config.json: is a directory");

  const std::string sock = tmp("sock");
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_CONTAINS(error_of([&] { SafeTensorsFile::open(sock); }), sock + ": is a socket");
  ::close(fd);
}

TEST_F(Robustness, ReadSmallFileEnforcesItsLimit) {
  spit(tmp("f"), std::string(100, 'x'));
  EXPECT_EQ(read_small_file(tmp("f"), 100), std::string(100, 'x'));
  const std::string msg = error_of([&] { read_small_file(tmp("f"), 99); });
  EXPECT_CONTAINS(msg, tmp("f") + ": file too large (100 bytes; at most 99");
  EXPECT_CONTAINS(error_of([&] { read_small_file(tmp("absent"), 9); }),
                  tmp("absent") + ": cannot open (No such file or directory)");
}

// ---- safetensors --------------------------------------------------------------------------------

TEST_F(Robustness, OverlappingTensorsAreRefusedNamingBoth) {
  const std::string p = safetensors("o.safetensors",
                                    R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                    R"("b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
                                    R"("c":{"dtype":"F32","shape":[3],"data_offsets":[8,20]}})",
                                    32);
  const std::string msg = error_of([&] { SafeTensorsFile::open(p); });
  EXPECT_CONTAINS(msg, p);
  EXPECT_CONTAINS(msg, "'a' [0, 16) and 'c' [8, 20) overlap");

  // Adjacent ranges, an empty tensor inside another's range and aliasing empties are fine.
  const std::string ok = safetensors("ok.safetensors",
                                     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]},)"
                                     R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                                     R"("f":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]}})",
                                     16);
  EXPECT_EQ(SafeTensorsFile::open(ok).tensors().size(), 4u);
}

// Files need not pad between tensors: an f16 tensor after a 1-byte one sits at an odd address.
TEST_F(Robustness, MisalignedTensorsReadAsValues) {
  std::string header = R"({"u":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("h":{"dtype":"F16","shape":[2],"data_offsets":[1,5]}})";
  while ((8 + header.size()) % 8) header += ' ';
  spit(tmp("m.safetensors"), le64(header.size()) + header + std::string("\x07\x00\x3c\x00\xc0", 5));
  const SafeTensorsFile f = SafeTensorsFile::open(tmp("m.safetensors"));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.get("h").data) % 2, 1u);
  EXPECT_EQ(f.read_f32("h"), (std::vector<float>{1.0f, -2.0f}));
}

TEST_F(Robustness, SafetensorsHeaderChecks) {
  const auto msg = [&](const std::string& header, size_t data = 8) {
    return error_of([&] { SafeTensorsFile::open(safetensors("h.safetensors", header, data)); });
  };
  EXPECT_CONTAINS(msg(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                      R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})"),
                  "duplicate key \"w\"");
  EXPECT_CONTAINS(msg(R"({"w":{"dtype":"F32","shape":[1],"dtype":"F16","data_offsets":[0,4]}})"),
                  "duplicate key \"dtype\"");
  EXPECT_CONTAINS(msg(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})"),
                  "9 dimensions (at most 8");
  EXPECT_CONTAINS(msg(R"({"w":{"dtype":"U8","shape":[0,18446744073709551615],)"
                      R"("data_offsets":[0,0]}})"),
                  "dimension 18446744073709551615 exceeds");
  EXPECT_CONTAINS(msg(R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})"), "bad shape");
  EXPECT_CONTAINS(msg(R"({"__metadata__":{"format":3}})"), "__metadata__ 'format' is not a string");
  EXPECT_CONTAINS(msg(R"({"__metadata__":["pt"]})"), "__metadata__ is not an object");
  EXPECT_CONTAINS(msg(std::string(100, '[') + std::string(100, ']')), "nested deeper");
  // A name with control characters is shown escaped, and a long one cut short.
  const std::string long_name = "a\nb" + std::string(5000, 'x');
  const std::string m = msg(R"({")" + std::string("a\\nb") + std::string(5000, 'x') +
                            R"(":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})");
  EXPECT_CONTAINS(m, "tensor 'a\\nbxxx");
  EXPECT_LT(m.size(), 400u) << m;
}

// ---- npy ----------------------------------------------------------------------------------------

std::string npy_file(const std::string& dict, const std::string& data, int version = 1) {
  std::string header = dict;
  const size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64) header.push_back(' ');
  header.push_back('\n');
  std::string f = std::string("\x93NUMPY", 6) + static_cast<char>(version) + '\0';
  for (size_t i = 0; i < prefix - 8; ++i) f.push_back(static_cast<char>(header.size() >> (8 * i)));
  return f + header + data;
}

TEST_F(Robustness, NpyHeaderChecks) {
  const auto msg = [&](const std::string& dict, const std::string& data = "") {
    const std::string p = tmp("a.npy");
    spit(p, npy_file(dict, data));
    const std::string m = error_of([&] { read_npy(p); });
    EXPECT_CONTAINS(m, p);
    return m;
  };
  const std::string good = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  spit(tmp("g.npy"), npy_file(good, std::string(8, '\0')));
  EXPECT_EQ(read_npy(tmp("g.npy")).shape, (Shape{2}));
  spit(tmp("v2.npy"),
       npy_file(R"({"descr":"<i4","fortran_order":False,"shape":()})", std::string(4, '\0'), 2));
  EXPECT_EQ(read_npy(tmp("v2.npy")).shape, Shape{});

  EXPECT_CONTAINS(msg("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}"),
                  "dimension exceeds");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),
                  "expected a dimension");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'fortran_order': False, 'shape': (1 << 70,)}"),
                  "bad .npy header");
  EXPECT_CONTAINS(
      msg("{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536, 65536, 65536)}"),
      "too large");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 4)}", "abc"),
                  "truncated .npy data");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}"),
                  "duplicate key 'descr'");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'shape': (1,)}"), "no 'fortran_order'");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'fortran_order': 0, 'shape': (1,)}"),
                  "fortran_order must be True or False");
  EXPECT_CONTAINS(msg("['descr', '<f4']"), "expected a dict");
  EXPECT_CONTAINS(msg(good + " trailing"), "text after the dict");
  EXPECT_CONTAINS(msg("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}"),
                  "unexpected key 'x'");
  // A long adversarial header (which a regex parser recursed on): a quick, clean error.
  std::string many = "{'descr': '<f4', 'fortran_order': False, 'shape': (";
  while (many.size() < 60000) many += "1, ";
  EXPECT_CONTAINS(msg(many + ")}"), "more than 32 dimensions");
  EXPECT_CONTAINS(msg("{'descr': '" + std::string(60000, '<') + "'"), "','");
}

TEST_F(Robustness, TruncatedNpyFiles) {
  const std::string full =
      npy_file("{'descr': '<i4', 'fortran_order': False, 'shape': (3,)}", std::string(12, '\0'));
  for (size_t n = 0; n < full.size(); ++n) {
    spit(tmp("t.npy"), full.substr(0, n));
    EXPECT_NE(error_of([&] { read_npy(tmp("t.npy")); }), "") << n << " bytes";
  }
  spit(tmp("t.npy"), full);
  EXPECT_EQ(read_npy(tmp("t.npy")).as_i32(), (std::vector<int32_t>{0, 0, 0}));
}

// ---- config.json and classes.json ---------------------------------------------------------------

class ConfigRobustness : public Robustness {
 protected:
  // The llamagen c2i fixture's config with `edit` applied; the error message, "" when accepted.
  std::string config_error(const std::function<void(nlohmann::json&)>& edit) {
    auto j = nlohmann::json::parse(slurp(kFixtures / "llamagen" / "c2i_f32" / "config.json"));
    edit(j);
    return error_of([&] { parse_model_config(j.dump(), "m"); });
  }
};

TEST_F(ConfigRobustness, AbsurdValuesAreRefusedNamingKeyAndRange) {
  EXPECT_EQ(config_error([](nlohmann::json&) {}), "");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["dim"] = 1000000000; }),
                  "m/config.json gpt: \"dim\" must be in [1, 32768], got 1000000000");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["vocab_size"] = 1ull << 40; }),
                  "\"vocab_size\" must be in [1, 16777216], got 1099511627776");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["vocab_size"] = 18446744073709551615ull; }),
                  "\"vocab_size\" must be in");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["n_layer"] = -1; }),
                  "\"n_layer\" must be in [1, 1024], got -1");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["n_layer"] = 2.5; }),
                  "\"n_layer\" has the wrong type (expected an integer)");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["norm_eps"] = 0; }),
                  "\"norm_eps\" must be in (0, 1], got 0");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["rope_base"] = 1e300; }),
                  "\"rope_base\" must be in [1, 1e+09], got 1e+300");
  EXPECT_CONTAINS(config_error([](auto& j) {
                    j["gpt"]["vocab_size"] = 1 << 20;
                    j["vq"]["codebook_size"] = 1 << 20;
                    j["gpt"]["dim"] = 4096;
                    j["gpt"]["n_head"] = 32;
                    j["gpt"]["n_kv_head"] = 32;
                  }),
                  "vocab_size x dim = 1048576 x 4096 exceeds the limit of 2147483647");
  EXPECT_CONTAINS(config_error([](auto& j) { j["vq"]["ch_mult"] = std::vector<int>(40, 1); }),
                  "\"ch_mult\" must have 1 to 8 entries, got 40");
  EXPECT_CONTAINS(config_error([](auto& j) {
                    j["vq"]["ch_mult"] = {1, 0, 2};
                  }),
                  "\"ch_mult[1]\" must be in [1, 64], got 0");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["file"] = "../../etc/passwd"; }),
                  "\"file\" must be a relative file name inside the model directory");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["file"] = "/etc/passwd"; }), "\"file\"");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["dtype"] = "i32"; }),
                  "\"dtype\" must be f32, f16 or bf16, got \"i32\"");
  EXPECT_CONTAINS(config_error([](auto& j) { j["tessera_format"] = 2; }),
                  "\"tessera_format\" must be in [1, 1], got 2");
  EXPECT_CONTAINS(config_error([](auto& j) { j["gpt"]["grid"] = 100000; }), "\"grid\"");
  EXPECT_CONTAINS(config_error([](auto& j) { j["sampling"] = {{"top_k", -3}}; }), "\"top_k\"");
  EXPECT_CONTAINS(error_of([] { parse_model_config(R"({"gpt": {}, "gpt": {}})", "m"); }),
                  "m/config.json: invalid JSON (duplicate key \"gpt\")");
  EXPECT_CONTAINS(error_of([] { parse_model_config("[1]", "m"); }), "expected a JSON object");
}

// Hawk's heads ("architecture": "hawk"): each key checked, naming it.
TEST_F(ConfigRobustness, HawkValues) {
  const auto hawk = nlohmann::json::parse(slurp(kFixtures / "spec" / "tiny_hawk" / "config.json"));
  auto error = [&](const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json j = hawk;
    edit(j);
    return error_of([&] { parse_model_config(j.dump(), "m"); });
  };
  EXPECT_EQ(error([](nlohmann::json&) {}), "");
  EXPECT_CONTAINS(error([](auto& j) { j["hawk"]["vertical_heads"] = 0; }),
                  "m/config.json hawk: \"vertical_heads\" must be in [1, 16], got 0");
  EXPECT_CONTAINS(error([](auto& j) { j["hawk"].erase("row_width"); }), "\"row_width\"");
  EXPECT_CONTAINS(error([](auto& j) { j["hawk"]["horizontal_heads"] = -1; }),
                  "\"horizontal_heads\" must be in [0, 64], got -1");
  EXPECT_CONTAINS(error([](auto& j) { j["hawk"]["feature"] = "pre_norm"; }),
                  "feature must be post_norm");
  EXPECT_CONTAINS(error([](auto& j) { j["hawk"]["heads"] = 3; }), "\"heads\"");
  EXPECT_CONTAINS(error([](auto& j) { j.erase("hawk"); }), "missing object \"hawk\"");
}

TEST_F(ConfigRobustness, MarValues) {
  auto j = nlohmann::json::parse(slurp(kFixtures / "mar" / "target_f32" / "config.json"));
  EXPECT_NO_THROW(parse_model_config(j.dump(), "m"));
  j["mar"]["image_size"] = 65536;
  j["mar"]["vae_stride"] = 16;
  EXPECT_CONTAINS(error_of([&] { parse_model_config(j.dump(), "m"); }),
                  "4096 tokens per side exceeds 1024");
  j["mar"]["image_size"] = 64;
  j["mar"]["mlp_ratio"] = -1;
  EXPECT_CONTAINS(error_of([&] { parse_model_config(j.dump(), "m"); }), "\"mlp_ratio\" must be in");
}

TEST(ClassNamesRobustness, HeldOutIdsAreIntegers) {
  for (const char* ids : {"[0.5]", "[1e300]", "[18446744073709551615]", "[\"0\"]", "3"}) {
    SCOPED_TRACE(ids);
    const std::string json =
        std::string(R"({"classes": [{"name": "x"}], "held_out_classes": )") + ids + "}";
    EXPECT_CONTAINS(error_of([&] { ClassNames::parse(json, 1, "c.json"); }), "held_out_classes");
  }
  EXPECT_CONTAINS(error_of([] {
                    ClassNames::parse(R"({"classes": [{"name": "x", "name": "y"}]})", 1, "c.json");
                  }),
                  "c.json: not valid JSON (duplicate key \"name\")");
}

// ---- png ----------------------------------------------------------------------------------------

// The CRC-32 of PNG chunks (ISO 3309), bit by bit.
uint32_t crc32_of(const char* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= static_cast<uint8_t>(p[i]);
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

TEST_F(Robustness, PngDimensionsAreBoundedBeforeAllocating) {
  // The corpus's one-pixel RGB image with its IHDR rewritten (its CRC recomputed).
  const std::string one = slurp(kFuzz / "corpus" / "png" / "one_pixel.png");
  ASSERT_GT(one.size(), 33u);
  const auto put32 = [](std::string& s, size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(v >> (24 - 8 * i));
  };
  const auto with_size = [&](uint32_t w, uint32_t h) {
    std::string p = one;
    put32(p, 16, w);
    put32(p, 20, h);
    put32(p, 29, crc32_of(p.data() + 12, 17));  // over "IHDR" and its 13 bytes
    return p;
  };
  int w = 0, h = 0;
  const auto read = [&](const std::string& png) {
    return error_of([&] {
      read_png_memory(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "x.png", w, h,
                      nullptr);
    });
  };
  EXPECT_CONTAINS(read(with_size(20000, 1)), "x.png: corrupt PNG header");
  EXPECT_CONTAINS(read(with_size(16384, 16384)), "x.png: image too large (16384 x 16384");
  const auto start = std::chrono::steady_clock::now();
  // Refused before decoding: deflate cannot expand the small file's data to that many pixels.
  EXPECT_CONTAINS(read(with_size(8192, 8192)), "bytes cannot hold 8192 x 8192 pixels");
  // Small enough to try, but the data runs out.
  EXPECT_CONTAINS(read(with_size(1000, 10)), "x.png: corrupt PNG data");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_CONTAINS(read(one.substr(0, 40)), "x.png: corrupt PNG");
  EXPECT_CONTAINS(read("GIF89a"), "x.png: not a PNG file");
}

// ---- the fuzz corpus and regressions
// -------------------------------------------------------------

const std::map<std::string, void (*)(const uint8_t*, size_t)> kTargets = {
    {"safetensors", fuzz::safetensors_input},
    {"npy", fuzz::npy_input},
    {"config", fuzz::config_input},
    {"png", fuzz::png_input}};

// Every file of tests/fuzz/corpus/<target> and tests/fuzz/regressions/<target> through its
// target: success or tessera::Error, nothing else (no other exception, crash or sanitizer report
// in the sanitizer build).
TEST(FuzzInputs, CorpusAndRegressionsGoThroughTheReaders) {
  size_t n = 0;
  for (const char* set : {"corpus", "regressions"})
    for (const auto& [name, run] : kTargets) {
      const fs::path dir = kFuzz / set / name;
      if (!fs::is_directory(dir)) continue;
      for (const auto& e : fs::directory_iterator(dir)) {
        if (!e.is_regular_file()) continue;
        SCOPED_TRACE(e.path().string());
        const std::string bytes = slurp(e.path());
        EXPECT_NO_THROW(run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
        ++n;
      }
    }
  EXPECT_GT(n, 40u);
}

// The seeds are valid files (bar the few meant to be refused), so that fuzzing starts from
// inputs that reach every part of the readers; the PNG seeds cover every colour type.
TEST(FuzzInputs, CorpusSeedsAreAccepted) {
  const std::set<std::string> refused = {"fortran.npy", "big_endian.npy"};
  for (const auto& e : fs::directory_iterator(kFuzz / "corpus" / "safetensors")) {
    SCOPED_TRACE(e.path().string());
    EXPECT_NO_THROW(SafeTensorsFile::open(e.path().string()));
  }
  for (const auto& e : fs::directory_iterator(kFuzz / "corpus" / "npy")) {
    SCOPED_TRACE(e.path().string());
    if (refused.count(e.path().filename().string()))
      EXPECT_THROW(read_npy(e.path().string()), Error);
    else
      EXPECT_NO_THROW(read_npy(e.path().string()));
  }
  for (const auto& e : fs::directory_iterator(kFuzz / "corpus" / "config")) {
    SCOPED_TRACE(e.path().string());
    const std::string text = slurp(e.path());
    const std::string name = e.path().filename().string();
    if (name.ends_with("_classes.json")) {
      const int n = static_cast<int>(nlohmann::json::parse(text)["classes"].size());
      EXPECT_NO_THROW(ClassNames::parse(text, n, name));
    } else {
      EXPECT_NO_THROW(parse_model_config(text, "m"));
    }
  }
  for (const auto& e : fs::directory_iterator(kFuzz / "corpus" / "png")) {
    SCOPED_TRACE(e.path().string());
    int w = 0, h = 0;
    std::vector<std::pair<std::string, std::string>> text;
    std::vector<uint8_t> rgb;
    EXPECT_NO_THROW(rgb = read_png(e.path().string(), w, h, &text));
    EXPECT_EQ(rgb.size(), static_cast<size_t>(w) * h * 3);
    EXPECT_GT(w, 0);
  }
}

// Pixel values of the hand-made PNG seeds (tests/fuzz/make_corpus.py): expansion of 1-bit gray
// and of a palette, 16-bit reduction and Adam7 interlacing.
TEST(FuzzInputs, PngSeedsDecodeToTheirPixels) {
  const auto load = [](const char* name, int& w, int& h) {
    std::vector<std::pair<std::string, std::string>> text;
    return read_png((kFuzz / "corpus" / "png" / name).string(), w, h, &text);
  };
  int w = 0, h = 0;
  const auto gray = load("gray1.png", w, h);
  ASSERT_EQ(w, 9);
  ASSERT_EQ(h, 2);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      EXPECT_EQ(gray[(y * w + x) * 3], (x + y) % 2 ? 255 : 0) << x << "," << y;
  const auto pal = load("palette2_trns.png", w, h);
  ASSERT_EQ(w, 6);
  EXPECT_EQ(std::vector<uint8_t>(pal.begin(), pal.begin() + 6),
            (std::vector<uint8_t>{255, 0, 0, 0, 255, 0}));
  const auto inter = load("rgb8_interlaced.png", w, h);
  ASSERT_EQ(w, 11);
  ASSERT_EQ(h, 9);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const uint8_t* p = &inter[(y * w + x) * 3];
      EXPECT_EQ(p[0], x * 20);
      EXPECT_EQ(p[1], y * 25);
      EXPECT_EQ(p[2], x ^ y);
    }
  std::vector<std::pair<std::string, std::string>> text;
  read_png((kFuzz / "corpus" / "png" / "gray4_itxt_after.png").string(), w, h, &text);
  ASSERT_EQ(text.size(), 1u);
  EXPECT_EQ(text[0].first, "Title");
  EXPECT_EQ(text[0].second, "\u00e9moji");
}

}  // namespace
