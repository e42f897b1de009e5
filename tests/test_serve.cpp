// tessera serve's HTTP server (tools/serve/server.h, issue 44), in-process on a free loopback
// port with cpp-httplib's client: the OpenAI images shape, each image equal to
// Pipeline::generate's for its seed and index (and to the same request made alone, whatever was
// batched beside it), JSON errors with 4xx for bad requests, 429 with Retry-After when the queue
// is full, 503 and freed slots for a request past its timeout, the metrics, and a graceful stop
// that finishes the request in flight.
#include <gtest/gtest.h>
#include <httplib.h>

#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "../tools/serve/server.h"
#include "tessera/image_io.h"

using namespace tessera;
using json = nlohmann::json;

namespace {

const std::string kFix = std::string(TESSERA_FIXTURES) + "/";
const std::string kEmoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/target";

std::string unbase64(const std::string& in) {
  static const std::string chars =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  int val = 0, bits = -8;
  for (char c : in) {
    if (c == '=') break;
    const size_t v = chars.find(c);
    if (v == std::string::npos) continue;
    val = (val << 6) + static_cast<int>(v);
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((val >> bits) & 0xFF));
      bits -= 8;
    }
  }
  return out;
}

// A server on its own thread over `pipe`, stopped and joined at the end of the test.
struct Running {
  serve::Server server;
  int port;
  std::thread thread;
  Running(Pipeline& pipe, serve::ServeOptions o)
      : server(pipe, (o.port = 0, o)), port(server.bind()), thread([this] { server.run(); }) {}
  ~Running() {
    server.stop();
    thread.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(120, 0);
    return c;
  }
};

// Waits (up to 10 s) until the server's /metrics has the line `want`.
bool wait_for_metric(const Running& srv, const std::string& want) {
  for (int i = 0; i < 1000; ++i) {
    const httplib::Result m = srv.client().Get("/metrics");
    if (m && m->body.find(want + "\n") != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

serve::ServeOptions options(const std::string& model, const std::string& method, int batch) {
  serve::ServeOptions o;
  o.model_dir = model;
  o.gen.spec.method = method;
  o.gen.batch = batch;
  o.gen.sampling.cfg_scale = 3.0f;
  o.gen.sampling.temperature = 1.0f;
  o.gen.sampling.top_k = 50;
  if (method == "sd") {
    o.gen.spec.draft_model = kFix + "spec/tiny_draft";
    o.gen.spec.draft_len = 3;
  }
  return o;
}

std::unique_ptr<Pipeline> load(const std::string& dir) {
  LoadOptions lo;
  lo.threads = 1;
  return Pipeline::load(dir, lo);
}

// The RGB pixels of response image i.
std::vector<uint8_t> image_of(const json& body, size_t i, const std::string& tmp) {
  const std::string png = unbase64(body["data"][i]["b64_json"].get<std::string>());
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    std::fwrite(png.data(), 1, png.size(), f);
    std::fclose(f);
  }
  int w = 0, h = 0;
  return read_png(tmp, w, h);
}

class ServeApi : public ::testing::TestWithParam<std::string> {};

// Three clients at once (n = 2, 1, 3) on a batch of 4: each image is Pipeline::generate's for the
// request's seed at index i, so nothing a request gets depends on what it was batched with.
TEST_P(ServeApi, ConcurrentRequestsGetTheirOwnImages) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  const serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", GetParam(), 4);
  Running srv(*pipe, o);
  struct Ask {
    int cls, n;
    uint64_t seed;
  };
  const std::vector<Ask> asks = {{1, 2, 11}, {2, 1, 12}, {3, 3, 13}};
  std::vector<std::future<httplib::Result>> replies;
  for (const Ask& a : asks)
    replies.push_back(std::async(std::launch::async, [&srv, a] {
      return srv.client().Post(
          "/v1/images/generations",
          json{{"class", a.cls}, {"n", a.n}, {"seed", a.seed}, {"response_format", "b64_json"}}
              .dump(),
          "application/json");
    }));
  const std::string tmp = testing::TempDir() + "serve_img.png";
  for (size_t k = 0; k < asks.size(); ++k) {
    const httplib::Result r = replies[k].get();
    ASSERT_TRUE(r) << "no response";
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    ASSERT_EQ(body["data"].size(), static_cast<size_t>(asks[k].n));
    GenerateOptions g = o.gen;
    g.seed = asks[k].seed;
    g.batch = 1;
    const auto grids =
        pipe->generate(std::vector<Condition>(asks[k].n, Condition::label(asks[k].cls)), g);
    for (int i = 0; i < asks[k].n; ++i) {
      EXPECT_EQ(image_of(body, i, tmp), pipe->decode(grids[i], 1))
          << "request " << k << " image " << i;
      EXPECT_EQ(body["tessera"]["images"][i]["seed"], asks[k].seed);
      EXPECT_EQ(body["tessera"]["images"][i]["image_index"], i);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, ServeApi, ::testing::Values("vanilla", "sd"));

// Bad requests get one JSON error each with a 4xx status naming the field; the server keeps
// answering.
TEST(Serve, BadRequestsAre4xxJson) {
  auto pipe = load(kEmoji);
  serve::ServeOptions o = options(kEmoji, "vanilla", 2);
  o.gen.sampling = {};
  o.max_body = 4096;
  Running srv(*pipe, o);
  httplib::Client c = srv.client();
  struct Case {
    std::string body;
    int status;
    std::string param, says;
  };
  const std::vector<Case> cases = {
      {"{bad", 400, "", "not valid JSON"},
      {"[1, 2]", 400, "", "JSON object"},
      {R"({"n": 1})", 400, "prompt", "give prompt"},
      {R"({"prompt": "zzqqxx"})", 400, "prompt", "no emoji named"},
      {R"({"prompt": "red apple", "n": 0})", 400, "n", "n must be"},
      {R"({"prompt": "red apple", "n": 17})", 400, "n", "n must be"},
      {R"({"prompt": "red apple", "size": "1024x1024"})", 400, "size", "64x64"},
      {R"({"prompt": "red apple", "response_format": "url"})", 400, "response_format", "b64_json"},
      {R"({"prompt": "red apple", "method": "sd"})", 400, "method", "this server runs"},
      {R"({"prompt": "red apple", "seed": -1})", 400, "seed", "non-negative"},
      {R"({"prompt": "red apple", "class": 3})", 400, "class", "not both"},
      {R"({"class": 100000})", 400, "class", "class must be"},
      {"{\"prompt\": \"" + std::string(5000, 'a') + "\"}", 413, "", "over 4096 bytes"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.body.substr(0, 60));
    const httplib::Result r = c.Post("/v1/images/generations", k.body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, k.status);
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_FALSE(e.is_discarded()) << r->body;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(k.says), std::string::npos) << r->body;
    if (!k.param.empty()) {
      EXPECT_EQ(e["error"]["param"], k.param);
    }
    EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  }
  const httplib::Result nf = c.Get("/v1/nothing");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  // Still answering, and a prompt resolves to its class's label.
  const httplib::Result ok =
      c.Post("/v1/images/generations", R"({"prompt": "red apple", "seed": 1})", "application/json");
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(json::parse(ok->body)["data"][0]["revised_prompt"], "red apple (twitter)");
  const httplib::Result models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "target");
  const httplib::Result health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  const httplib::Result m = c.Get("/metrics");
  ASSERT_TRUE(m);
  for (const std::string want :
       {"tessera_requests_total{code=\"400\"} 12", "tessera_requests_total{code=\"413\"} 1",
        "tessera_images_total 1", "tessera_tokens_total 256", "tessera_request_seconds_count 1",
        "tessera_mean_accepted_length{method=\"vanilla\"} 1", "tessera_queue_images 0"})
    EXPECT_NE(m->body.find(want), std::string::npos) << want << "\n" << m->body;
}

// A queue of 1 image beyond a batch of 1: while one request is decoded and one waits, a third is
// answered 429 with Retry-After. A request past its timeout is answered 503 and its slot freed:
// the next request still runs.
TEST(Serve, FullQueueIs429AndTimeoutsFreeTheirSlots) {
  auto pipe = load(kEmoji);
  serve::ServeOptions o = options(kEmoji, "vanilla", 1);
  o.gen.sampling = {};
  o.queue = 1;
  o.timeout_s = 0.25;  // an emoji image takes longer on one thread of this machine
  Running srv(*pipe, o);
  auto post = [&srv](int seed) {
    return srv.client().Post("/v1/images/generations",
                             json{{"prompt", "red apple"}, {"seed", seed}}.dump(),
                             "application/json");
  };
  auto first = std::async(std::launch::async, post, 1);
  ASSERT_TRUE(wait_for_metric(srv, "tessera_in_flight_images 1"));
  auto second = std::async(std::launch::async, post, 2);
  ASSERT_TRUE(wait_for_metric(srv, "tessera_queue_images 1"));
  const httplib::Result third = post(3);
  ASSERT_TRUE(third);
  EXPECT_EQ(third->status, 429) << third->body;
  EXPECT_EQ(third->get_header_value("Retry-After"), "1");
  for (auto* f : {&first, &second}) {
    const httplib::Result r = f->get();
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_NE(r->body.find("timed out"), std::string::npos);
  }
  // Both timed-out requests gave their slot and queue place back.
  EXPECT_TRUE(wait_for_metric(srv, "tessera_queue_images 0"));
  EXPECT_TRUE(wait_for_metric(srv, "tessera_in_flight_images 0"));
  EXPECT_TRUE(wait_for_metric(srv, "tessera_requests_total{code=\"503\"} 2"));
}

// stop() while a request is decoded: it is answered in full, then run() returns.
TEST(Serve, StopFinishesTheRequestInFlight) {
  auto pipe = load(kEmoji);  // its images take long enough to stop the server during one
  serve::ServeOptions o = options(kEmoji, "vanilla", 2);
  o.gen.sampling = {};
  auto srv = std::make_unique<Running>(*pipe, o);
  auto reply = std::async(std::launch::async, [&] {
    return srv->client().Post("/v1/images/generations",
                              json{{"prompt", "red apple"}, {"n", 2}}.dump(), "application/json");
  });
  ASSERT_TRUE(wait_for_metric(*srv, "tessera_in_flight_images 2"));
  srv->server.stop();
  const httplib::Result r = reply.get();
  ASSERT_TRUE(r) << "the request in flight got no response";
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(json::parse(r->body)["data"].size(), 2u);
  srv.reset();  // joins run()
}

}  // namespace
