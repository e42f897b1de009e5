// Choosing the device (tensor/device.h, LoadOptions::device): the accepted spellings, one backend
// per device for the process, and the errors a build without CUDA gives before any work.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "cli_harness.h"
#include "pipeline/device_memory.h"
#include "tensor/cuda/cuda_backend.h"
#include "tensor/device.h"
#include "tessera/devices.h"
#include "tessera/error.h"
#include "tessera/tessera.h"

namespace {

using tessera::Device;

TEST(Device, ParsesTheAcceptedForms) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:12"), Device::cuda(12));
  EXPECT_EQ(Device::parse("cuda:3").str(), "cuda:3");
  EXPECT_EQ(Device::cpu().str(), "cpu");
}

TEST(Device, RefusesOtherTextNamingIt) {
  for (const std::string bad :
       {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1a", "cuda0", "Cpu"}) {
    try {
      Device::parse(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const tessera::ParameterError& e) {
      EXPECT_EQ(e.param(), "device");
      EXPECT_EQ(std::string(e.what()), "device " + bad +
                                           ": not a device (one of: cpu, cuda, cuda:N with N a "
                                           "device number)");
    }
  }
}

TEST(Device, TheCpuIsTheProcessWideCpuBackend) {
  EXPECT_EQ(&tessera::backend_for(Device::cpu()), &tessera::cpu_backend());
  EXPECT_EQ(&tessera::backend_for("cpu"), &tessera::cpu_backend());
  EXPECT_NO_THROW(tessera::check_device("cpu"));
}

// A CUDA device this process cannot use, and the start of the error it gets, in any build: the
// CPU build says how to get the backend; a CUDA build without a GPU says none was found; with a
// GPU, an ordinal past the last is refused with the count.
struct UnusableCuda {
  std::vector<std::string> devices;
  std::string error;  // what the message says after "device <text>: "
};
UnusableCuda unusable_cuda() {
  std::string why;
  const auto devs = tessera::list_cuda_devices(&why);
  if (!tessera::cuda_built())
    return {{"cuda", "cuda:2"},
            "this build of tessera has no CUDA backend (configure with -DTESSERA_CUDA=ON)"};
  if (devs.empty()) return {{"cuda", "cuda:2"}, "no CUDA device found (" + why + ")"};
  return {{"cuda:99"}, "this machine has " + std::to_string(devs.size()) + " CUDA device"};
}

TEST(Device, AnUnusableCudaDeviceIsRefusedWithTheReason) {
  const UnusableCuda u = unusable_cuda();
  for (const std::string& dev : u.devices) {
    try {
      tessera::check_device(dev);
      ADD_FAILURE() << dev << " was accepted";
    } catch (const tessera::ParameterError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("device " + dev + ": " + u.error, 0), 0u) << e.what();
    }
  }
  std::string why;
  const auto devs = tessera::list_cuda_devices(&why);
  if (!tessera::cuda_built()) {
    EXPECT_TRUE(devs.empty());
    EXPECT_NE(why.find("-DTESSERA_CUDA=ON"), std::string::npos) << why;
  }
  if (devs.empty()) {
    EXPECT_FALSE(why.empty());
  }
}

TEST(DevicePipeline, LoadOnAnUnusableCudaDeviceThrowsBeforeReading) {
  const UnusableCuda u = unusable_cuda();
  tessera::LoadOptions lo;
  lo.device = u.devices.front();
  // A directory that does not exist: the device error comes first, before any file is read.
  EXPECT_THROW(
      {
        try {
          tessera::Pipeline::load("/nonexistent/model", lo);
        } catch (const tessera::Error& e) {
          EXPECT_NE(std::string(e.what()).find("device " + lo.device + ": " + u.error),
                    std::string::npos)
              << e.what();
          throw;
        }
      },
      tessera::Error);
}

TEST(DevicePipeline, KnowsItsDevice) {
  tessera::LoadOptions lo;
  lo.load_decoder = false;
  const auto pipe = tessera::Pipeline::load(fixture("c2i_f32"), lo);
  EXPECT_EQ(pipe->device(), "cpu");
  // The backend's figure is the machine's free memory read now, which other processes (the tests
  // running beside this one) change between two reads: the same source, not the same bytes.
  const double got = static_cast<double>(pipe->available_memory());
  const double want = static_cast<double>(tessera::cpu_backend().available_memory());
  EXPECT_GT(want, 0.0);
  EXPECT_NEAR(got, want, 0.1 * want);
}

// What a device must hold before the upload: the weights files the pipeline loads, plus a guided
// image's f32 KV cache for LlamaGen (MAR has none).
TEST(DevicePipeline, MemoryNeededIsTheWeightsAndOneImagesKvCache) {
  namespace fs = std::filesystem;
  const tessera::ModelConfig c = tessera::load_model_config(fixture("c2i_f32"));
  const int64_t gpt = static_cast<int64_t>(fs::file_size(fixture("c2i_f32") + "/gpt.safetensors"));
  const int64_t vq = static_cast<int64_t>(fs::file_size(fixture("c2i_f32") + "/vq.safetensors"));
  const tessera::GptConfig& g = c.gpt;
  const int64_t kv =
      int64_t{16} * g.n_layer * g.n_kv_head * (g.cls_token_num + g.n_image_tokens()) * g.head_dim();
  int64_t w = 0, k = 0;
  EXPECT_EQ(tessera::device_bytes_needed(c, true, &w, &k), gpt + vq + kv);
  EXPECT_EQ(w, gpt + vq);
  EXPECT_EQ(k, kv);
  EXPECT_EQ(tessera::device_bytes_needed(c, false, &w, &k), gpt + kv);
  // The CPU has room for a fixture: no error.
  EXPECT_NO_THROW(tessera::check_device_memory(c, true, tessera::cpu_backend(), "cpu"));

  const std::string mar_dir = fixture("../mar/target_f32");
  const tessera::ModelConfig m = tessera::load_model_config(mar_dir);
  EXPECT_EQ(tessera::device_bytes_needed(m, false, &w, &k),
            static_cast<int64_t>(fs::file_size(mar_dir + "/mar.safetensors")));
  EXPECT_EQ(k, 0);
}

}  // namespace
