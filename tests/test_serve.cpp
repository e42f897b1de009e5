// tessera serve's HTTP server (tools/serve/server.h, issue 44), in-process on a free loopback
// port with cpp-httplib's client: the OpenAI images shape, each image equal to
// Pipeline::generate's for its seed, index and settings (and to the same request made alone,
// whatever was batched beside it), per-request methods and sampling, the streamed previews and
// acceptance map, JSON errors with 4xx for bad requests, 429 with Retry-After when the queue is
// full, 503 and freed slots for a request past its timeout or whose client has gone, the metrics,
// the page, and a graceful stop that finishes the request in flight.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "../tools/serve/server.h"
#include "tessera/image_io.h"

using namespace tessera;
using json = nlohmann::json;

namespace {

const std::string kFix = std::string(TESSERA_FIXTURES) + "/";
const std::string kEmoji = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/target";
const std::string kEmojiDraft = std::string(TESSERA_SOURCE_DIR) + "/models/emoji/draft";

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

// The RGB pixels of response image i, through a file of this process's own (ctest -j runs the
// instances of a parameterised test at once, in the same temporary directory).
std::vector<uint8_t> image_of(const json& body, size_t i, const std::string& tmp_name) {
  const std::string png = unbase64(body["data"][i]["b64_json"].get<std::string>());
  const std::string tmp = tmp_name + "." + std::to_string(getpid());
  {
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    std::fwrite(png.data(), 1, png.size(), f);
    std::fclose(f);
  }
  int w = 0, h = 0;
  std::vector<uint8_t> rgb = read_png(tmp, w, h);
  std::remove(tmp.c_str());
  return rgb;
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
  o.methods = {{"vanilla", ""}, {"lantern", kEmojiDraft}};
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
      {R"({"prompt": "red apple", "method": "sd"})", 400, "method",
       "this server runs lantern, vanilla"},
      {R"({"prompt": "red apple", "params": {"lantern.k": 3}})", 400, "params.lantern.k",
       "method vanilla has no parameters"},
      {R"({"prompt": "red apple", "method": "lantern", "params": {"lantern.q": 3}})", 400,
       "params.lantern.q", "parameters lantern.k, lantern.delta"},
      {R"({"prompt": "red apple", "method": "lantern", "params": {"lantern.k": "x"}})", 400,
       "params.lantern.k", "must be an integer"},
      {R"({"prompt": "red apple", "method": "lantern", "params": {"lantern.delta": -1}})", 400,
       "params.lantern.delta", "params.lantern.delta must be"},
      // Only the engine knows this one's range (k below the vocabulary of the model).
      {R"({"prompt": "red apple", "method": "lantern", "params": {"lantern.k": 100000}})", 400,
       "lantern.k", "lantern.k"},
      {R"({"prompt": "red apple", "temperature": 0})", 400, "temperature", "(0, 100]"},
      {R"({"prompt": "red apple", "top_p": 1.5})", 400, "top_p", "(0, 1]"},
      {R"({"prompt": "red apple", "top_k": -1})", 400, "top_k", "top_k must be"},
      {R"({"prompt": "red apple", "draft_len": 0})", 400, "draft_len", "draft_len must be"},
      // This server's default method is vanilla, which drafts nothing (with or without costs).
      {R"({"prompt": "red apple", "draft_len": 3})", 400, "draft_len", "drafts nothing"},
      {R"({"prompt": "red apple", "draft_len": "auto",
           "draft_costs": {"verify": [0.1, 0.2], "draft_step": 0.01}})",
       400, "draft_len", "drafts nothing"},
      // draft_costs: a response's tessera.draft_costs, for draft_len "auto" only.
      {R"({"prompt": "red apple", "draft_costs": {"verify": [0.1]}})", 400, "draft_costs",
       "applies to draft_len \"auto\""},
      {R"({"prompt": "red apple", "draft_len": "auto", "draft_costs": {"verify": [0.1]}})", 400,
       "draft_costs", "as a response's tessera.draft_costs"},
      {R"({"prompt": "red apple", "draft_len": "auto", "draft_costs": {"verify": [], "draft_step": 0}})",
       400, "draft_costs", "as a response's tessera.draft_costs"},
      {R"({"prompt": "red apple", "draft_len": "auto", "draft_costs": [0.1]})", 400, "draft_costs",
       "as a response's tessera.draft_costs"},
      {R"({"prompt": "red apple", "draft_len": "auto",
           "draft_costs": {"verify": [0.1, -1], "draft_step": 0}})",
       400, "draft_costs", "positive seconds"},
      {R"({"prompt": "red apple", "draft_len": "auto",
           "draft_costs": {"verify": [1], "draft_step": -1}})",
       400, "draft_costs", "non-negative seconds"},
      {R"({"prompt": "red apple", "draft_len": "auto",
           "draft_costs": {"verify": [1], "draft_step": 0, "x": 2}})",
       400, "draft_costs", "as a response's tessera.draft_costs"},
      // draft_hold: a response's tessera.draft_hold, for draft_len "auto" only.
      {R"({"prompt": "red apple", "method": "lantern", "draft_len": 3, "draft_hold": 2})", 400,
       "draft_hold", "applies to draft_len \"auto\""},
      {R"({"prompt": "red apple", "method": "lantern", "draft_len": "auto", "draft_hold": 0})", 400,
       "draft_hold", "[1, 1024]"},
      {R"({"prompt": "red apple", "method": "lantern", "draft_len": "auto", "draft_hold": 1.5})",
       400, "draft_hold", "[1, 1024]"},
      // Only the engine knows how many it needs (a cost for each length it may choose).
      {R"({"prompt": "red apple", "method": "lantern", "draft_len": "auto",
           "draft_costs": {"draft_step": 0.001, "verify": [0.01, 0.02]}})",
       400, "draft_costs", "verification costs"},
      {R"({"prompt": "red apple", "stream": 1})", 400, "stream", "true or false"},
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
       {"tessera_requests_total{code=\"400\"} 35", "tessera_requests_total{code=\"413\"} 1",
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
  o.timeout_s = 0.1;  // an emoji image takes longer on one thread
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

namespace {

// The Server-Sent Events of a body: (event, data) in order; comments skipped.
std::vector<std::pair<std::string, json>> events_of(const std::string& body) {
  std::vector<std::pair<std::string, json>> out;
  size_t at = 0;
  for (size_t end; (end = body.find("\n\n", at)) != std::string::npos; at = end + 2) {
    std::string event, data;
    std::istringstream frame(body.substr(at, end - at));
    for (std::string line; std::getline(frame, line);) {
      if (line.rfind("event: ", 0) == 0) event = line.substr(7);
      if (line.rfind("data: ", 0) == 0) data += line.substr(6);
    }
    if (!data.empty()) out.push_back({event, json::parse(data)});
  }
  return out;
}

// Sends a request on a raw socket and closes it without reading: a client that went away.
void post_and_hang_up(int port, const std::string& body) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string req =
      "POST /v1/images/generations HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  close(fd);
}

}  // namespace

// Requests with different methods, method parameters and sampling settings at once, on a server
// whose default is vanilla: each image is Pipeline::generate's with the request's own settings,
// whatever else was in flight; each method had a batch of its own, and a request that changed
// only its sampling shared the default's.
TEST(Serve, EachRequestRunsItsOwnSettings) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", "vanilla", 4);
  o.methods = {
      {"vanilla", ""}, {"sd", kFix + "spec/tiny_draft"}, {"lantern", kFix + "spec/tiny_draft"}};
  // The batches counted below are the requests' own: none started at bind().
  o.warm_up = false;
  Running srv(*pipe, o);
  struct Ask {
    json body;
    GenerateOptions gen;
  };
  std::vector<Ask> asks;
  auto with = [&o](const std::string& method, auto&& change) {
    GenerateOptions g = o.gen;
    if (method != "vanilla") {
      g.spec = {};
      g.spec.method = method;
      g.spec.draft_model = kFix + "spec/tiny_draft";
    }
    change(g);
    return g;
  };
  asks.push_back({{{"class", 1}, {"n", 2}, {"seed", 5}}, with("vanilla", [](auto&) {})});
  asks.push_back({{{"class", 1}, {"n", 2}, {"seed", 5}, {"method", "sd"}, {"draft_len", 2}},
                  with("sd", [](GenerateOptions& g) { g.spec.draft_len = 2; })});
  asks.push_back(
      {{{"class", 2}, {"seed", 6}, {"method", "lantern"}, {"params", {{"lantern.k", 3}}}},
       with("lantern", [](GenerateOptions& g) { g.spec.params["lantern.k"] = int64_t{3}; })});
  asks.push_back({{{"class", 2}, {"seed", 6}, {"temperature", 0.5}, {"top_k", 7}, {"cfg", 1.5}},
                  with("vanilla", [](GenerateOptions& g) {
                    g.sampling.temperature = 0.5f;
                    g.sampling.top_k = 7;
                    g.sampling.cfg_scale = 1.5f;
                  })});
  std::vector<std::future<httplib::Result>> replies;
  for (const Ask& a : asks)
    replies.push_back(std::async(std::launch::async, [&srv, &a] {
      return srv.client().Post("/v1/images/generations", a.body.dump(), "application/json");
    }));
  const std::string tmp = testing::TempDir() + "serve_settings.png";
  std::set<std::string> images;
  for (size_t k = 0; k < asks.size(); ++k) {
    SCOPED_TRACE(asks[k].body.dump());
    const httplib::Result r = replies[k].get();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    EXPECT_EQ(body["tessera"]["method"], asks[k].gen.spec.method);
    GenerateOptions g = asks[k].gen;
    g.seed = body["tessera"]["images"][0]["seed"];
    g.batch = 1;
    const size_t n = body["data"].size();
    const auto grids = pipe->generate(
        std::vector<Condition>(n, Condition::label(asks[k].body["class"].get<int>())), g);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(image_of(body, i, tmp), pipe->decode(grids[i], 1)) << "image " << i;
      images.insert(body["data"][i]["b64_json"].get<std::string>());
    }
  }
  EXPECT_EQ(images.size(), 6u) << "settings that differ make different images";
  // vanilla, sd and lantern each had a batch; the request that changed only its sampling shared
  // vanilla's.
  EXPECT_TRUE(wait_for_metric(srv, "tessera_settings 3"));
  const httplib::Result m = srv.client().Get("/metrics");
  ASSERT_TRUE(m);
  for (const std::string want : {"tessera_mean_accepted_length{method=\"sd\"}",
                                 "tessera_mean_accepted_length{method=\"lantern\"}"})
    EXPECT_NE(m->body.find(want), std::string::npos) << want;
}

// The default setting's batch starts at bind(), before any request (a --draft-len auto
// calibration with it); warm_up off leaves it to the first request.
TEST(Serve, TheDefaultSettingStartsBeforeTheFirstRequest) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  for (const bool warm : {true, false}) {
    SCOPED_TRACE(warm ? "warm_up" : "no warm_up");
    serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", "sd", 2);
    o.warm_up = warm;
    Running srv(*pipe, o);
    EXPECT_TRUE(wait_for_metric(srv, warm ? "tessera_settings 1" : "tessera_settings 0"));
    const httplib::Result r =
        srv.client().Post("/v1/images/generations", json{{"class", 1}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_TRUE(wait_for_metric(srv, "tessera_settings 1"));  // the request joined that batch
  }
}

namespace {
// A generation request that must succeed: its answer.
json generated(Running& srv, const json& body) {
  const httplib::Result r =
      srv.client().Post("/v1/images/generations", body.dump(), "application/json");
  EXPECT_TRUE(r);
  if (!r) return json::object();
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body);
}
}  // namespace

// draft_len "auto": a response gives the costs its batch chose by (the server's calibration), and a
// request that passes them back runs on them without calibrating: the same costs as that batch's,
// so it joins it, and makes the same image for the same seed. Other costs get a batch of their
// own; a batch with a fixed draft length reports none. The hold of the lengths likewise.
TEST(Serve, DraftCostsComeBackAndGoBackIn) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", "sd", 2);
  o.gen.spec.draft_len = kDraftLenAuto;
  o.gen.spec.max_auto_len = 3;
  Running srv(*pipe, o);
  auto post = [&srv](const json& body) { return generated(srv, body); };
  const json first = post({{"class", 1}, {"seed", 3}});
  ASSERT_TRUE(first["tessera"].contains("draft_costs")) << first["tessera"].dump();
  const json costs = first["tessera"]["draft_costs"];
  ASSERT_GE(costs["verify"].size(), 4u);  // 1 to max_auto_len + 1 positions
  EXPECT_GT(costs["draft_step"].get<double>(), 0.0);
  const json again = post({{"class", 1}, {"seed", 3}, {"draft_costs", costs}});
  EXPECT_EQ(again["tessera"]["draft_costs"], costs);
  EXPECT_EQ(again["data"][0]["b64_json"], first["data"][0]["b64_json"]);
  EXPECT_TRUE(wait_for_metric(srv, "tessera_settings 1"));
  EXPECT_TRUE(wait_for_metric(srv, "tessera_joined_settings 1"));  // it joined the batch
  json other = costs;
  for (json& v : other["verify"]) v = v.get<double>() * 2;  // twice the cost at every length
  const json twice = post({{"class", 1}, {"seed", 3}, {"draft_costs", other}});
  EXPECT_EQ(twice["tessera"]["draft_costs"], other);
  EXPECT_TRUE(wait_for_metric(srv, "tessera_settings 2"));  // a batch of its own
  const json fixed = post({{"class", 1}, {"seed", 3}, {"draft_len", 2}});
  EXPECT_FALSE(fixed["tessera"].contains("draft_costs"));
  // The rounds a chosen length was held for come back too (1 here: the CPU's host loop chooses
  // every round), and go back in.
  EXPECT_EQ(first["tessera"]["draft_hold"], 1);
  EXPECT_FALSE(fixed["tessera"].contains("draft_hold"));
  const json held = post({{"class", 1}, {"seed", 3}, {"draft_costs", costs}, {"draft_hold", 4}});
  EXPECT_EQ(held["tessera"]["draft_hold"], 4);
}

// A server's --draft-hold holds its auto lengths; a request with a fixed draft_len has none.
TEST(Serve, AServersHoldIsForItsAutoLengths) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", "sd", 2);
  o.gen.spec.draft_len = kDraftLenAuto;
  o.gen.spec.max_auto_len = 3;
  o.gen.spec.auto_hold = 4;
  Running srv(*pipe, o);
  auto post = [&srv](const json& body) { return generated(srv, body); };
  EXPECT_EQ(post({{"class", 1}, {"seed", 3}})["tessera"]["draft_hold"], 4);
  EXPECT_FALSE(
      post({{"class", 1}, {"seed", 3}, {"draft_len", 2}})["tessera"].contains("draft_hold"));
}

// Every served method starts at bind() too (drafter loaded, costs calibrated): lantern, drafting
// with the server's draft model and length, joins sd's batch; sjd (Jacobi) gets a batch of its own
// while max_settings allows. Requests naming one go to its batch. --separate-methods gives
// lantern one too.
TEST(Serve, EveryServedMethodStartsBeforeTheFirstRequest) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  for (const int max_settings : {4, 1}) {
    for (const bool separate : {false, true}) {
      SCOPED_TRACE("max_settings " + std::to_string(max_settings) + (separate ? ", separate" : ""));
      serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", "sd", 2);
      o.methods = {
          {"sd", kFix + "spec/tiny_draft"}, {"lantern", kFix + "spec/tiny_draft"}, {"sjd", ""}};
      o.max_settings = max_settings;
      o.separate_methods = separate;
      Running srv(*pipe, o);
      const std::string batches =
          "tessera_settings " + std::to_string(std::min(separate ? 3 : 2, max_settings));
      const std::string joined = std::string("tessera_joined_settings ") + (separate ? "0" : "1");
      EXPECT_TRUE(wait_for_metric(srv, batches));
      EXPECT_TRUE(wait_for_metric(srv, joined));
      const httplib::Result r =
          srv.client().Post("/v1/images/generations",
                            json{{"class", 1}, {"method", "lantern"}}.dump(), "application/json");
      ASSERT_TRUE(r);
      EXPECT_EQ(r->status, 200) << r->body;
      EXPECT_TRUE(wait_for_metric(srv, batches));
      EXPECT_TRUE(wait_for_metric(srv, joined));
    }
  }
}

// Methods that draft alike (here sd, lantern and cool-sd with one draft model and draft length)
// share one batch: they start as one at bind(), their requests in flight at once are stepped in
// the same forwards, and each image is the one its method makes alone. A request with another
// draft length gets a batch of its own.
TEST(Serve, MethodsThatDraftAlikeShareABatch) {
  auto pipe = load(kFix + "llamagen/c2i_f32");
  serve::ServeOptions o = options(kFix + "llamagen/c2i_f32", "sd", 8);
  o.gen.spec.draft_len = 0;  // every method's default
  const std::string draft = kFix + "spec/tiny_draft";
  o.methods = {{"sd", draft}, {"lantern", draft}, {"cool-sd", draft}};
  Running srv(*pipe, o);
  EXPECT_TRUE(wait_for_metric(srv, "tessera_settings 1"));
  EXPECT_TRUE(wait_for_metric(srv, "tessera_joined_settings 2"));
  struct Ask {
    json body;
    SpeculativeOptions spec;
  };
  auto spec = [&](const std::string& method, MethodParams params = {}, int draft_len = 0) {
    SpeculativeOptions s;
    s.method = method;
    s.draft_model = draft;
    s.params = std::move(params);
    s.draft_len = draft_len;
    return s;
  };
  const std::vector<Ask> asks = {
      {{{"class", 1}, {"n", 2}, {"seed", 5}}, spec("sd")},
      {{{"class", 1}, {"n", 2}, {"seed", 5}, {"method", "lantern"}}, spec("lantern")},
      {{{"class", 2}, {"seed", 6}, {"method", "lantern"}, {"params", {{"lantern.k", 3}}}},
       spec("lantern", {{"lantern.k", int64_t{3}}})},
      {{{"class", 1}, {"n", 2}, {"seed", 5}, {"method", "cool-sd"}}, spec("cool-sd")},
      {{{"class", 3}, {"seed", 7}, {"method", "lantern"}, {"draft_len", 2}},
       spec("lantern", {}, 2)}};
  std::vector<std::future<httplib::Result>> replies;
  for (const Ask& a : asks)
    replies.push_back(std::async(std::launch::async, [&srv, &a] {
      return srv.client().Post("/v1/images/generations", a.body.dump(), "application/json");
    }));
  const std::string tmp = testing::TempDir() + "serve_joined.png";
  for (size_t k = 0; k < asks.size(); ++k) {
    SCOPED_TRACE(asks[k].body.dump());
    const httplib::Result r = replies[k].get();
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json body = json::parse(r->body);
    EXPECT_EQ(body["tessera"]["method"], asks[k].spec.method);
    GenerateOptions g = o.gen;
    g.spec = asks[k].spec;
    g.seed = body["tessera"]["images"][0]["seed"];
    g.batch = 1;
    const size_t n = body["data"].size();
    const auto grids = pipe->generate(
        std::vector<Condition>(n, Condition::label(asks[k].body["class"].get<int>())), g);
    for (size_t i = 0; i < n; ++i)
      EXPECT_EQ(image_of(body, i, tmp), pipe->decode(grids[i], 1)) << "image " << i;
  }
  // lantern with lantern.k 3 joined too; the shorter draft got a batch of its own.
  EXPECT_TRUE(wait_for_metric(srv, "tessera_settings 2"));
  EXPECT_TRUE(wait_for_metric(srv, "tessera_joined_settings 3"));
  const httplib::Result m = srv.client().Get("/metrics");
  ASSERT_TRUE(m);
  for (const std::string want : {"tessera_mean_accepted_length{method=\"sd\"}",
                                 "tessera_mean_accepted_length{method=\"lantern\"}",
                                 "tessera_mean_accepted_length{method=\"cool-sd\"}"})
    EXPECT_NE(m->body.find(want), std::string::npos) << want;
}

// "stream": true: previews while the image is generated (the image so far, its tokens and
// acceptance map), then the image itself, equal to the one the same request gets unstreamed.
TEST(Serve, StreamSendsPreviewsThenTheImage) {
  auto pipe = load(kEmoji);  // with its trained draft, which is accepted
  serve::ServeOptions o = options(kEmoji, "sd", 2);
  o.gen.sampling = {};
  o.gen.spec.draft_model = kEmojiDraft;
  Running srv(*pipe, o);
  const json ask = {{"prompt", "red apple"}, {"seed", 9}};
  json streamed = ask;
  streamed["stream"] = true;
  const httplib::Result s =
      srv.client().Post("/v1/images/generations", streamed.dump(), "application/json");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->status, 200) << s->body;
  EXPECT_EQ(s->get_header_value("Content-Type"), "text/event-stream");
  const auto events = events_of(s->body);
  ASSERT_GE(events.size(), 2u) << s->body;
  const int total = pipe->config().gpt.grid * pipe->config().gpt.grid;
  int64_t last = 0;
  for (size_t e = 0; e + 1 < events.size(); ++e) {
    EXPECT_EQ(events[e].first, "image_generation.partial_image");
    const json& t = events[e].second["tessera"];
    EXPECT_GT(t["tokens"].get<int64_t>(), last) << "previews advance";
    EXPECT_LT(t["tokens"].get<int64_t>(), total);
    last = t["tokens"];
    EXPECT_EQ(t["accepted_depth"].size(), static_cast<size_t>(total));
  }
  const auto& [type, done] = events.back();
  EXPECT_EQ(type, "image_generation.completed");
  EXPECT_EQ(done["type"], "image_generation.completed");
  EXPECT_EQ(done["tessera"]["tokens"], total);
  EXPECT_EQ(done["tessera"]["method"], "sd");
  EXPECT_GE(done["tessera"]["mean_accepted_length"].get<double>(), 1.0);
  int accepted = 0;
  for (const json& d : done["tessera"]["accepted_depth"]) accepted += d.get<int>() > 0;
  EXPECT_GT(accepted, 0) << "sd accepted some drafts, and the map shows where";
  const httplib::Result plain =
      srv.client().Post("/v1/images/generations", ask.dump(), "application/json");
  ASSERT_TRUE(plain);
  EXPECT_EQ(done["b64_json"], json::parse(plain->body)["data"][0]["b64_json"]);
}

// A client that hangs up while its images are generated gets them cancelled at the next step, long
// before its timeout, streamed or not; the server goes on answering.
TEST(Serve, AClientThatHangsUpFreesItsSlots) {
  auto pipe = load(kEmoji);
  serve::ServeOptions o = options(kEmoji, "vanilla", 2);
  o.gen.sampling = {};
  Running srv(*pipe, o);
  // 16 emoji images on one thread take seconds; the hang-up comes 0.1 s in.
  post_and_hang_up(srv.port, R"({"prompt": "red apple", "n": 16})");
  ASSERT_TRUE(wait_for_metric(srv, "tessera_disconnects_total 1"));
  ASSERT_TRUE(wait_for_metric(srv, "tessera_in_flight_images 0"));
  ASSERT_TRUE(wait_for_metric(srv, "tessera_queue_images 0"));
  post_and_hang_up(srv.port, R"({"prompt": "red apple", "n": 16, "stream": true})");
  ASSERT_TRUE(wait_for_metric(srv, "tessera_disconnects_total 2"));
  ASSERT_TRUE(wait_for_metric(srv, "tessera_in_flight_images 0"));
  const httplib::Result m = srv.client().Get("/metrics");
  ASSERT_TRUE(m);
  const size_t at = m->body.find("\ntessera_images_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stoi(m->body.substr(at + 22)), 8) << "most of the 32 images were never made";
  const httplib::Result ok =
      srv.client().Post("/v1/images/generations", R"({"prompt": "red apple"})", "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
}

// GET / is the page: self-contained, with the controls and views the browser test drives.
TEST(Serve, ThePageIsServed) {
  auto pipe = load(kEmoji);
  Running srv(*pipe, options(kEmoji, "vanilla", 1));
  const httplib::Result r = srv.client().Get("/");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/html; charset=utf-8");
  for (const std::string id : {"prompt", "method", "seed", "generate", "image", "heatmap", "stats"})
    EXPECT_NE(r->body.find("id=\"" + id + "\""), std::string::npos) << id;
  EXPECT_EQ(r->body.find("<script src"), std::string::npos) << "no outside scripts";
  const json models = json::parse(srv.client().Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["tessera"]["grid"], 16);
  EXPECT_EQ(models["data"][0]["tessera"]["classes"].size(),
            static_cast<size_t>(pipe->config().gpt.num_classes));
}

// A text-conditional model serves typed prompts through its text encoder: the image is the one
// Pipeline::generate makes for the same prompt and seed; a whitespace-only prompt is a 400 naming
// the prompt, and the server keeps answering.
TEST(Serve, AT2iModelAnswersTypedPrompts) {
  LoadOptions lo;
  lo.threads = 1;
  lo.text_encoder = kFix + "t5/f32";
  auto pipe = Pipeline::load(kFix + "llamagen/t2i_f32", lo);
  const serve::ServeOptions o = options(kFix + "llamagen/t2i_f32", "vanilla", 2);
  Running srv(*pipe, o);
  const std::string prompt = "Two Dogs on a beach";
  httplib::Result r =
      srv.client().Post("/v1/images/generations",
                        json{{"prompt", prompt}, {"n", 2}, {"seed", 5}}.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json body = json::parse(r->body);
  GenerateOptions g = o.gen;
  g.seed = 5;
  g.batch = 1;
  const auto grids = pipe->generate({Condition::text(prompt), Condition::text(prompt)}, g);
  const std::string tmp = testing::TempDir() + "serve_t2i.png";
  for (int i = 0; i < 2; ++i) EXPECT_EQ(image_of(body, i, tmp), pipe->decode(grids[i], 1));
  r = srv.client().Post("/v1/images/generations", json{{"prompt", " \t "}}.dump(),
                        "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400) << r->body;
  EXPECT_NE(r->body.find("prompt"), std::string::npos) << r->body;
  r = srv.client().Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}
