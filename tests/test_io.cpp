// IO layer: safetensors (writer and validating reader), .npy, PNG with text chunks, and the
// WeightLoader's checks of names, shapes and dtypes.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/npy.h"
#include "io/safetensors.h"
#include "models/weights.h"
#include "tensor/backend.h"
#include "tessera/error.h"
#include "tessera/image_io.h"

namespace fs = std::filesystem;
using namespace tessera;

namespace {

std::vector<unsigned char> bytes_of(const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  return {b, b + n};
}

template <typename T>
HostTensor host(DType dt, Shape shape, const std::vector<T>& v) {
  return HostTensor{dt, std::move(shape), bytes_of(v.data(), v.size() * sizeof(T))};
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string le64(uint64_t v) {
  std::string s(8, '\0');
  std::memcpy(s.data(), &v, 8);
  return s;
}

// A per-test scratch directory and helpers that expect an Error naming the file.
class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() /
           ("tessera_io_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string tmp(const std::string& name) const { return (dir_ / name).string(); }

  // Runs `f`, which must throw a tessera::Error whose message contains every needle.
  template <typename F>
  static void expect_error(F&& f, const std::vector<std::string>& needles) {
    try {
      f();
      ADD_FAILURE() << "no error thrown; expected one naming " << ::testing::PrintToString(needles);
    } catch (const Error& e) {
      const std::string msg = e.what();
      for (const auto& n : needles)
        EXPECT_NE(msg.find(n), std::string::npos) << "expected '" << n << "' in: " << msg;
    }
  }

  fs::path dir_;
};

// ---- safetensors -------------------------------------------------------------------------------

class IoSafetensors : public IoTest {
 protected:
  // A raw file: 8-byte header length, header text, data.
  std::string raw(const std::string& name, const std::string& header, size_t data_bytes) {
    const std::string path = tmp(name);
    write_bytes(path, le64(header.size()) + header + std::string(data_bytes, '\x01'));
    return path;
  }
  void expect_open_error(const std::string& path, const std::string& needle) {
    expect_error([&] { SafeTensorsFile::open(path); }, {path, needle});
  }
};

TEST_F(IoSafetensors, WriteOpenRoundTrip) {
  std::map<std::string, HostTensor> in;
  in["a.weight"] = host<float>(DType::F32, {2, 3}, {1, 2, 3, 4, 5, -6.5f});
  in["b"] = host<uint16_t>(DType::BF16, {3}, {0x3f80, 0xc000, 0x0001});
  in["c"] = host<uint16_t>(DType::F16, {1, 1}, {0x3c00});
  in["ids"] = host<int64_t>(DType::I64, {2}, {-1, 1LL << 40});
  in["i32"] = host<int32_t>(DType::I32, {1}, {-7});
  in["mask"] = host<uint8_t>(DType::U8, {5}, {1, 0, 1, 1, 0});
  in["empty"] = HostTensor{DType::F32, {0, 4}, {}};
  write_safetensors(tmp("m.safetensors"), in);

  const SafeTensorsFile f = SafeTensorsFile::open(tmp("m.safetensors"));
  EXPECT_EQ(f.path(), tmp("m.safetensors"));
  ASSERT_EQ(f.tensors().size(), in.size());
  for (const auto& [name, t] : in) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.has(name));
    const SafeTensorInfo& info = f.get(name);
    EXPECT_EQ(info.dtype, t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    ASSERT_EQ(info.nbytes, t.bytes.size());
    EXPECT_EQ(bytes_of(info.data, info.nbytes), t.bytes);
  }
  EXPECT_FALSE(f.has("nope"));
  expect_error([&] { f.get("nope"); }, {"'nope'", tmp("m.safetensors")});
}

namespace {
// The file-backed pages this process has mapped (/proc/self/status RssFile), in bytes.
int64_t rss_file_bytes() {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("RssFile:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  return -1;
}
}  // namespace

// A weight the CPU backend packs (a copy in panels) leaves no resident pages of the file behind
// once its NaN/Inf scan and packing have read them; a matrix used in place keeps its pages (the
// measure sees them). A T5-XL next to a GPT-XL had 15.6 GB resident, twice their weights.
TEST_F(IoSafetensors, PackedWeightsReleaseTheirFilePages) {
  const int64_t rows = 2048, cols = 1024, bytes = rows * cols * 4;  // 8 MiB each
  std::map<std::string, HostTensor> in;
  std::vector<float> v(static_cast<size_t>(rows * cols), 0.5f);
  for (const char* name : {"packed", "in_place"}) {
    HostTensor t{DType::F32, {rows, cols}, {}};
    t.bytes.resize(static_cast<size_t>(bytes));
    std::memcpy(t.bytes.data(), v.data(), t.bytes.size());
    in[name] = std::move(t);
  }
  const std::string path = tmp("w.safetensors");
  write_safetensors(path, in);
  ASSERT_GT(rss_file_bytes(), 0) << "no RssFile in /proc/self/status";
  WeightLoader w(path, DType::F32, cpu_backend());
  int64_t before = rss_file_bytes();
  const Tensor packed = w.linear("packed", {rows, cols});
  const int64_t packed_growth = rss_file_bytes() - before;
  before = rss_file_bytes();
  const Tensor kept = w.matrix("in_place", {rows, cols});
  const int64_t kept_growth = rss_file_bytes() - before;
  EXPECT_GT(kept_growth, bytes / 2) << "the measure should see a scanned matrix's pages";
  EXPECT_LT(packed_growth, bytes / 8) << "the packed weight's file pages stayed resident";
  // Released pages read back from the file: the in-place data and the packed copy are intact.
  EXPECT_EQ(download_f32(cpu_backend(), kept)[12345], 0.5f);
  const std::vector<float> ones(static_cast<size_t>(cols), 1.0f);
  const Tensor x = cpu_backend().upload(ones.data(), DType::F32, {1, cols});
  Tensor y = cpu_backend().empty(DType::F32, {1, rows});
  cpu_backend().linear(x, packed, nullptr, y);
  EXPECT_EQ(download_f32(cpu_backend(), y)[7], 0.5f * cols);
}

TEST_F(IoSafetensors, HeaderIsPaddedSoDataIsAligned) {
  std::map<std::string, HostTensor> in;
  in["x"] = host<float>(DType::F32, {3}, {1, 2, 3});
  write_safetensors(tmp("p.safetensors"), in);
  const SafeTensorsFile f = SafeTensorsFile::open(tmp("p.safetensors"));
  const auto* base = f.mapping()->data();
  EXPECT_EQ((static_cast<const unsigned char*>(f.get("x").data) - base) % 8, 0);
}

TEST_F(IoSafetensors, ReadsMetadata) {
  const std::string path = raw(
      "meta.safetensors",
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
      8);
  const SafeTensorsFile f = SafeTensorsFile::open(path);
  EXPECT_EQ(f.tensors().size(), 1u);
  ASSERT_EQ(f.metadata().count("format"), 1u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
}

TEST_F(IoSafetensors, RejectsMissingFile) {
  expect_open_error(tmp("absent.safetensors"), "cannot");
}

TEST_F(IoSafetensors, RejectsFileShorterThanHeaderLength) {
  write_bytes(tmp("short.safetensors"), "abc");
  expect_open_error(tmp("short.safetensors"), "truncated");
}

TEST_F(IoSafetensors, RejectsHeaderLengthBeyondFile) {
  const std::string path = tmp("long.safetensors");
  write_bytes(path, le64(1000) + "{}");
  expect_open_error(path, "header length 1000");
  write_bytes(path, le64(~0ull) + "{}");
  expect_open_error(path, "corrupt safetensors header");
}

TEST_F(IoSafetensors, RejectsInvalidJson) {
  expect_open_error(raw("bad.safetensors", "{\"x\": [1, 2", 0), "invalid JSON");
  expect_open_error(raw("arr.safetensors", "[1, 2]", 0), "not a JSON object");
}

TEST_F(IoSafetensors, RejectsOffsetsNotMatchingShape) {
  expect_open_error(
      raw("off.safetensors", R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 16),
      "'w'");
  expect_open_error(
      raw("rev.safetensors", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 16),
      "data offsets");
}

TEST_F(IoSafetensors, RejectsTensorBeyondEndOfFile) {
  expect_open_error(
      raw("end.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
      "'w'");
}

// 2^62 x 4 elements of 4 bytes is 2^66 bytes: the size must not wrap around to 0 and match the
// empty byte range.
TEST_F(IoSafetensors, RejectsShapeWhoseByteSizeOverflows) {
  expect_open_error(
      raw("ovf.safetensors",
          R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 8),
      "'w'");
}

TEST_F(IoSafetensors, RejectsBadEntries) {
  // F64 is read (reference statistics, FeatureStatistics::load); BOOL is not a tessera dtype.
  expect_open_error(
      raw("dt.safetensors", R"({"w":{"dtype":"BOOL","shape":[1],"data_offsets":[0,1]}})", 1),
      "BOOL");
  expect_open_error(raw("miss.safetensors", R"({"w":{"dtype":"F32","shape":[1]}})", 4), "'w'");
  expect_open_error(
      raw("neg.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4),
      "shape");
}

// ---- npy ---------------------------------------------------------------------------------------

class IoNpy : public IoTest {
 protected:
  // A version 1.0 .npy file with the given header dict and data, padded as NumPy pads it.
  std::string raw(const std::string& name, const std::string& dict, const std::string& data) {
    std::string header = dict;
    while ((10 + header.size() + 1) % 64) header.push_back(' ');
    header.push_back('\n');
    std::string file = std::string("\x93NUMPY\x01\x00", 8);
    file.push_back(static_cast<char>(header.size() & 0xff));
    file.push_back(static_cast<char>(header.size() >> 8));
    const std::string path = tmp(name);
    write_bytes(path, file + header + data);
    return path;
  }
  static std::string dict(const std::string& descr, const std::string& shape) {
    return "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  }
  template <typename T>
  void round_trip(DType dt, const Shape& shape, const std::vector<T>& v) {
    SCOPED_TRACE(dtype_name(dt) + std::string(" ") + shape_str(shape));
    const std::string path = tmp("rt.npy");
    write_npy(path, dt, shape, v.data());
    EXPECT_EQ((fs::file_size(path) - v.size() * sizeof(T)) % 64, 0u) << "header not 64-aligned";
    const NpyArray a = read_npy(path);
    EXPECT_EQ(a.dtype, dt);
    EXPECT_EQ(a.shape, shape);
    EXPECT_EQ(a.bytes, bytes_of(v.data(), v.size() * sizeof(T)));
  }
};

TEST_F(IoNpy, RoundTripF32) {
  round_trip<float>(DType::F32, {2, 3}, {0.5f, -1, 2, 3e8f, -0.0f, 7});
  const NpyArray a = read_npy(tmp("rt.npy"));
  EXPECT_EQ(a.as_f32(), (std::vector<float>{0.5f, -1, 2, 3e8f, -0.0f, 7}));
  expect_error([&] { a.as_i32(); }, {"integer"});
}

TEST_F(IoNpy, RoundTripI32) {
  round_trip<int32_t>(DType::I32, {2, 2, 2}, {0, 1, -2, 3, 255, 256, 1 << 30, -(1 << 30)});
  const NpyArray a = read_npy(tmp("rt.npy"));
  EXPECT_EQ(a.as_i32(), (std::vector<int32_t>{0, 1, -2, 3, 255, 256, 1 << 30, -(1 << 30)}));
  expect_error([&] { a.as_f32(); }, {"float"});
}

TEST_F(IoNpy, RoundTripU8OneDimensional) {
  round_trip<uint8_t>(DType::U8, {5}, {0, 1, 127, 128, 255});
  EXPECT_EQ(read_npy(tmp("rt.npy")).as_i32(), (std::vector<int32_t>{0, 1, 127, 128, 255}));
}

TEST_F(IoNpy, ReadsHandWrittenI64) {
  const std::vector<int64_t> v = {3, -4, 1LL << 31, 255};
  const std::string path = raw("i64.npy", dict("<i8", "(2, 2)"),
                               std::string(reinterpret_cast<const char*>(v.data()), 32));
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.dtype, DType::I64);
  EXPECT_EQ(a.shape, (Shape{2, 2}));
  expect_error([&] { a.as_i32(); }, {"2147483648"});  // 2^31 does not fit int32

  const std::vector<int64_t> ok = {3, -4, 7};
  const NpyArray b = read_npy(raw("i64b.npy", dict("<i8", "(3,)"),
                                  std::string(reinterpret_cast<const char*>(ok.data()), 24)));
  EXPECT_EQ(b.as_i32(), (std::vector<int32_t>{3, -4, 7}));
}

TEST_F(IoNpy, ReadsHandWrittenF16) {
  const std::vector<uint16_t> h = {0x3c00, 0xc000, 0x3800, 0x0000, 0x7bff, 0x0001};
  const NpyArray a = read_npy(raw("f16.npy", dict("<f2", "(1, 2, 3)"),
                                  std::string(reinterpret_cast<const char*>(h.data()), 12)));
  EXPECT_EQ(a.dtype, DType::F16);
  EXPECT_EQ(a.shape, (Shape{1, 2, 3}));
  EXPECT_EQ(a.as_f32(), (std::vector<float>{1.0f, -2.0f, 0.5f, 0.0f, 65504.0f, 5.9604645e-08f}));
}

TEST_F(IoNpy, RejectsTruncatedData) {
  const std::string path = raw("trunc.npy", dict("<f4", "(4, 4)"), std::string(60, '\0'));
  expect_error([&] { read_npy(path); }, {path, "truncated", "[4, 4]", "64"});
}

TEST_F(IoNpy, RejectsShapeWhoseByteSizeOverflows) {
  const std::string path = raw("ovf.npy", dict("<f4", "(4611686018427387904, 4)"), "");
  expect_error([&] { read_npy(path); }, {path});
}

TEST_F(IoNpy, RejectsTruncatedHeader) {
  const std::string path = tmp("hdr.npy");
  write_bytes(path, std::string("\x93NUMPY\x01\x00\x40\x00{'descr'", 18));
  expect_error([&] { read_npy(path); }, {path, "truncated"});
}

TEST_F(IoNpy, RejectsUnsupportedDescr) {
  for (const char* descr : {"<c8", ">f8", ">i4", "<U3", "|b1"}) {
    const std::string path = raw("descr.npy", dict(descr, "(2,)"), std::string(32, '\0'));
    expect_error([&] { read_npy(path); }, {path, descr});
  }
}

// float64 arrays (reference tables) are read, widened exactly by as_f64 and rounded by as_f32.
TEST_F(IoNpy, ReadsFloat64) {
  const double v[2] = {0.1, -2.5e-300};
  std::string data(reinterpret_cast<const char*>(v), sizeof v);
  const std::string path = raw("f8.npy", dict("<f8", "(2,)"), data);
  const NpyArray a = read_npy(path);
  EXPECT_EQ(a.as_f64(), std::vector<double>(v, v + 2));
  EXPECT_EQ(a.as_f32(), (std::vector<float>{0.1f, -0.0f}));
  EXPECT_THROW(a.as_i32(), Error);
}

TEST_F(IoNpy, RejectsFortranOrderAndNonNpy) {
  const std::string f =
      raw("fortran.npy", "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }",
          std::string(16, '\0'));
  expect_error([&] { read_npy(f); }, {f, "Fortran"});
  write_bytes(tmp("text.npy"), "just some text, not an array\n");
  expect_error([&] { read_npy(tmp("text.npy")); }, {tmp("text.npy"), "not a .npy"});
  expect_error([&] { read_npy(tmp("absent.npy")); }, {tmp("absent.npy")});
}

// ---- png ---------------------------------------------------------------------------------------

class IoPng : public IoTest {};

TEST_F(IoPng, RoundTripPixelsAndText) {
  const int W = 5, H = 3;
  std::vector<uint8_t> rgb(W * H * 3);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<uint8_t>(i * 17 + 3);
  const std::vector<std::pair<std::string, std::string>> text = {
      {"parameters", "model=m; class=3; seed=1; cfg=4.000\nsecond line"}, {"Software", "tessera"}};
  write_png(tmp("a.png"), rgb.data(), W, H, text);

  int w = 0, h = 0;
  std::vector<std::pair<std::string, std::string>> got;
  EXPECT_EQ(read_png(tmp("a.png"), w, h, &got), rgb);
  EXPECT_EQ(w, W);
  EXPECT_EQ(h, H);
  EXPECT_EQ(got, text);
}

TEST_F(IoPng, NoTextChunks) {
  const std::vector<uint8_t> rgb = {255, 0, 0, 0, 255, 0};
  write_png(tmp("b.png"), rgb.data(), 2, 1);
  int w = 0, h = 0;
  std::vector<std::pair<std::string, std::string>> got;
  EXPECT_EQ(read_png(tmp("b.png"), w, h, &got), rgb);
  EXPECT_TRUE(got.empty());
  EXPECT_EQ(read_png(tmp("b.png"), w, h), rgb);  // text is optional
}

TEST_F(IoPng, ReportsUnreadableFiles) {
  int w = 0, h = 0;
  expect_error([&] { read_png(tmp("absent.png"), w, h); }, {tmp("absent.png")});
  write_bytes(tmp("bad.png"), "this is not a png file at all");
  expect_error([&] { read_png(tmp("bad.png"), w, h); }, {tmp("bad.png")});
  const std::vector<uint8_t> px(3, 0);
  expect_error([&] { write_png(tmp("no_dir/c.png"), px.data(), 1, 1); }, {"no_dir/c.png"});
}

// ---- WeightLoader ------------------------------------------------------------------------------

class IoWeights : public IoTest {
 protected:
  void SetUp() override {
    IoTest::SetUp();
    std::map<std::string, HostTensor> t;
    t["w"] = host<float>(DType::F32, {2, 3}, {1, 2, 3, 4, 5, 6});
    t["norm"] = host<uint16_t>(DType::F16, {2}, {0x3c00, 0xc000});  // 1, -2
    t["ids"] = host<int32_t>(DType::I32, {2}, {1, 2});
    path_ = tmp("weights.safetensors");
    write_safetensors(path_, t);
  }
  WeightLoader loader(DType dt = DType::F32) { return WeightLoader(path_, dt, cpu_backend()); }
  std::string path_;
};

TEST_F(IoWeights, LoadsMatricesAndConvertsSmallTensors) {
  WeightLoader l = loader();
  Tensor w = l.matrix("w", {2, 3});
  EXPECT_EQ(w.dtype, DType::F32);
  std::vector<float> wv(6);
  cpu_backend().download(w, wv.data());
  EXPECT_EQ(wv, (std::vector<float>{1, 2, 3, 4, 5, 6}));
  Tensor n = l.f32("norm", {2});
  EXPECT_EQ(n.dtype, DType::F32);
  std::vector<float> nv(2);
  cpu_backend().download(n, nv.data());
  EXPECT_EQ(nv, (std::vector<float>{1.0f, -2.0f}));
  expect_error([&] { l.finish(); }, {path_, "'ids'"});  // never requested: unexpected
}

TEST_F(IoWeights, ReportsMissingTensor) {
  WeightLoader l = loader();
  expect_error(
      [&] {
        l.matrix("layers.0.attention.wo.weight", {2, 3});
      },
      {path_, "missing", "'layers.0.attention.wo.weight'"});
}

TEST_F(IoWeights, ReportsWrongShape) {
  WeightLoader l = loader();
  expect_error([&] { l.matrix("w", {3, 2}); }, {path_, "'w'", "[2, 3]", "[3, 2]"});
  expect_error([&] { l.f32("norm", {3}); }, {path_, "'norm'", "[2]", "[3]"});
}

TEST_F(IoWeights, ReportsWrongDtype) {
  WeightLoader l = loader(DType::BF16);
  expect_error([&] { l.matrix("w", {2, 3}); }, {path_, "'w'", "f32", "bf16"});
  expect_error([&] { l.f32("ids", {2}); }, {path_, "'ids'", "i32"});
}

TEST_F(IoWeights, ReportsUnexpectedTensor) {
  WeightLoader l = loader();
  l.matrix("w", {2, 3});
  l.f32("norm", {2});
  expect_error([&] { l.finish(); }, {path_, "unexpected", "'ids'"});
}

TEST_F(IoWeights, ReportsCorruptFile) {
  write_bytes(path_, le64(4) + "{}");
  expect_error([&] { loader(); }, {path_});
}

}  // namespace
