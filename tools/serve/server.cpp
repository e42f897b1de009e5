#include "server.h"

#include <httplib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "tessera/class_names.h"
#include "tessera/error.h"
#include "tessera/generation.h"
#include "tessera/image_io.h"

namespace tessera::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

// A request's fault: answered with `status` and an OpenAI-style error body.
struct HttpError {
  int status;
  std::string message, param;
};

json error_body(const std::string& message, const std::string& type, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", json()}}}};
}

// One POST's images, shared by its HTTP thread and the engine.
struct Job {
  std::vector<GenerationRequest> images;
  std::vector<std::string> labels;
  std::vector<int> ids;  // generation ids, -1 until added
  std::vector<std::vector<uint8_t>> pixels;
  std::vector<ImageStats> stats;
  size_t added = 0, done = 0;
  bool cancelled = false, failed = false;
  std::string error;
  bool complete() const { return failed || done == images.size(); }
};

// Prometheus text exposition of the server's counters.
struct Metrics {
  std::map<int, int64_t> requests;  // by status
  int64_t images = 0, tokens = 0, rounds = 0, accepted = 0;
  static constexpr double kBuckets[] = {0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
  std::vector<int64_t> latency = std::vector<int64_t>(std::size(kBuckets) + 1, 0);
  double latency_sum = 0.0;
  int64_t latency_count = 0;

  void observe(double s) {
    size_t b = 0;
    while (b < std::size(kBuckets) && s > kBuckets[b]) ++b;
    latency[b]++;
    latency_sum += s;
    latency_count++;
  }
};

}  // namespace

struct Server::Impl {
  Pipeline& pipe;
  ServeOptions o;
  std::optional<ClassNames> names;
  std::string model_id, method;
  int image_size = 0;
  httplib::Server http;

  std::mutex mu;
  std::condition_variable engine_cv, done_cv;
  std::deque<std::shared_ptr<Job>> queue;                       // jobs with images not yet added
  std::map<int, std::pair<std::shared_ptr<Job>, size_t>> live;  // generation id -> (job, image)
  size_t waiting = 0;                                           // images queued, not added
  bool stopping = false;
  Metrics metrics;
  std::atomic<int> in_flight{0};

  Impl(Pipeline& p, ServeOptions opts) : pipe(p), o(std::move(opts)) {
    const ModelConfig& mc = pipe.config();
    if (ClassNames::present(o.model_dir)) names = ClassNames::load(o.model_dir, mc.gpt.num_classes);
    std::filesystem::path dir = std::filesystem::path(mc.dir).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();  // "models/emoji/target/"
    model_id = dir.filename().string();
    method = o.gen.spec.method;
    image_size = pipe.image_size();
  }

  // ---- the engine thread -----------------------------------------------------------------------
  void engine() {
    std::unique_ptr<Generation> gen;
    try {
      gen = pipe.start_generation(o.gen);
    } catch (const std::exception& e) {
      fail_all(std::string("the engine could not start: ") + e.what());
      return;
    }
    for (;;) {
      {
        std::unique_lock lock(mu);
        // Cancelled jobs (timed out) give their slots back now.
        for (auto it = live.begin(); it != live.end();) {
          if (it->second.first->cancelled) {
            gen->cancel(it->first);
            it = live.erase(it);
          } else {
            ++it;
          }
        }
        for (auto it = queue.begin(); it != queue.end();)
          if ((*it)->cancelled) {
            waiting -= (*it)->images.size() - (*it)->added;
            it = queue.erase(it);
          } else {
            ++it;
          }
        // Admit queued images while the batch has room: first come, first served.
        while (!queue.empty() && gen->capacity() > 0) {
          Job& job = *queue.front();
          const size_t i = job.added++;
          const int id = gen->add(job.images[i]);
          job.ids[i] = id;
          live[id] = {queue.front(), i};
          waiting--;
          if (job.added == job.images.size()) queue.pop_front();
        }
        in_flight = gen->in_flight();
        if (gen->in_flight() == 0) {
          if (stopping) return;
          engine_cv.wait(lock);
          continue;
        }
      }
      try {
        gen->step();
        for (FinishedImage& f : gen->poll()) {
          std::vector<uint8_t> px = pipe.decode(f.tokens, 1);
          std::lock_guard lock(mu);
          auto it = live.find(f.id);
          if (it == live.end()) continue;  // cancelled meanwhile
          Job& job = *it->second.first;
          job.pixels[it->second.second] = std::move(px);
          job.stats[it->second.second] = f.stats;
          job.done++;
          metrics.images++;
          metrics.tokens += f.stats.tokens;
          metrics.rounds += f.stats.rounds;
          metrics.accepted += f.stats.tokens - 1;
          live.erase(it);
          if (job.complete()) done_cv.notify_all();
        }
      } catch (const std::exception& e) {
        fail_all(std::string("generation failed: ") + e.what());
        return;
      }
    }
  }

  void fail_all(const std::string& why) {
    std::lock_guard lock(mu);
    for (auto& [id, entry] : live) entry.first->failed = true, entry.first->error = why;
    for (auto& job : queue) job->failed = true, job->error = why;
    live.clear();
    queue.clear();
    waiting = 0;
    stopping = true;
    done_cv.notify_all();
  }

  // ---- HTTP ------------------------------------------------------------------------------------
  void reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(body.dump(), "application/json");
    std::lock_guard lock(mu);
    metrics.requests[status]++;
  }
  void reply_error(httplib::Response& res, const HttpError& e) {
    const std::string type = e.status >= 500 ? "server_error" : "invalid_request_error";
    reply(res, e.status, error_body(e.message, type, e.param));
  }

  // The job a request body asks for (throws HttpError).
  std::shared_ptr<Job> parse(const std::string& body) {
    const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) throw HttpError{400, "the body is not valid JSON", ""};
    if (!j.is_object()) throw HttpError{400, "the body must be a JSON object", ""};
    auto field = [&](const char* k) -> const json* {
      auto it = j.find(k);
      return it == j.end() || it->is_null() ? nullptr : &*it;
    };
    auto job = std::make_shared<Job>();
    int n = 1;
    if (const json* v = field("n")) {
      if (!v->is_number_integer() || v->get<int64_t>() < 1 || v->get<int64_t>() > o.max_n)
        throw HttpError{400, "n must be an integer in [1, " + std::to_string(o.max_n) + "]", "n"};
      n = v->get<int>();
    }
    uint64_t seed = 0;
    if (const json* v = field("seed")) {
      if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0))
        throw HttpError{400, "seed must be a non-negative integer", "seed"};
      seed = v->get<uint64_t>();
    }
    if (const json* v = field("size")) {
      const std::string want = std::to_string(image_size) + "x" + std::to_string(image_size);
      if (!v->is_string() || v->get<std::string>() != want)
        throw HttpError{400, "size: this model makes " + want + " images", "size"};
    }
    if (const json* v = field("response_format"))
      if (!v->is_string() || v->get<std::string>() != "b64_json")
        throw HttpError{400, "response_format: only b64_json is served", "response_format"};
    // Options fixed for the server: a request may restate them, not change them.
    for (const char* k : {"method", "cfg", "temperature", "top_k", "top_p"})
      if (const json* v = field(k)) {
        const bool same =
            std::string(k) == "method"
                ? v->is_string() && v->get<std::string>() == method
                : v->is_number() && std::abs(v->get<double>() - server_setting(k)) < 1e-6;
        if (!same)
          throw HttpError{400,
                          std::string(k) + ": this server runs " + server_settings_text() +
                              " for every request (start one server per setting)",
                          k};
      }
    int class_id = -1;
    std::string label;
    const json* prompt = field("prompt");
    const json* cls = field("class");
    if (prompt && cls) throw HttpError{400, "give prompt or class, not both", "class"};
    if (cls) {
      if (!cls->is_number_integer() || cls->get<int64_t>() < 0 ||
          cls->get<int64_t>() >= pipe.config().gpt.num_classes)
        throw HttpError{400,
                        "class must be an integer in [0, " +
                            std::to_string(pipe.config().gpt.num_classes) + ")",
                        "class"};
      class_id = cls->get<int>();
      label = names ? names->label(class_id) : "class " + std::to_string(class_id);
    } else if (prompt) {
      if (!prompt->is_string() || prompt->get<std::string>().empty())
        throw HttpError{400, "prompt must be a non-empty string", "prompt"};
      if (!names)
        throw HttpError{400, "this model has no class names (classes.json): give class", "prompt"};
      std::string style;
      if (const json* v = field("style")) {
        if (!v->is_string()) throw HttpError{400, "style must be a string", "style"};
        style = v->get<std::string>();
      }
      try {
        class_id = names->match(prompt->get<std::string>(), style).class_id;
      } catch (const Error& e) {
        throw HttpError{400, e.what(), "prompt"};
      }
      label = names->label(class_id);
    } else {
      throw HttpError{400, "give prompt (or class)", "prompt"};
    }
    for (int i = 0; i < n; ++i) {
      job->images.push_back({Condition::label(class_id), seed, static_cast<uint64_t>(i)});
      job->labels.push_back(label);
    }
    job->ids.assign(n, -1);
    job->pixels.resize(n);
    job->stats.resize(n);
    return job;
  }

  double server_setting(const std::string& k) const {
    const SamplingOptions s = resolve_sampling(o.gen.sampling, pipe.config().sampling);
    if (k == "cfg") return s.cfg_scale;
    if (k == "temperature") return s.temperature;
    if (k == "top_k") return s.top_k;
    return s.top_p;
  }
  std::string server_settings_text() const {
    char buf[160];
    std::snprintf(buf, sizeof buf, "method %s, cfg %g, temperature %g, top_k %g, top_p %g",
                  method.c_str(), server_setting("cfg"), server_setting("temperature"),
                  server_setting("top_k"), server_setting("top_p"));
    return buf;
  }

  void generations(const httplib::Request& req, httplib::Response& res) {
    const auto t0 = Clock::now();
    std::shared_ptr<Job> job;
    try {
      job = parse(req.body);
    } catch (const HttpError& e) {
      reply_error(res, e);
      return;
    }
    {
      std::unique_lock lock(mu);
      if (stopping) {
        lock.unlock();
        reply_error(res, {503, "the server is shutting down", ""});
        return;
      }
      if (waiting + job->images.size() > static_cast<size_t>(o.queue)) {
        lock.unlock();
        res.set_header("Retry-After", "1");
        reply_error(
            res,
            {429, "the queue is full (" + std::to_string(o.queue) + " images waiting); retry later",
             ""});
        return;
      }
      queue.push_back(job);
      waiting += job->images.size();
      engine_cv.notify_one();
      const auto deadline = t0 + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o.timeout_s));
      if (!done_cv.wait_until(lock, deadline, [&] { return job->complete(); })) {
        job->cancelled = true;  // the engine frees its slots at the next step
        engine_cv.notify_one();
        lock.unlock();
        reply_error(res, {503, "timed out after " + std::to_string(o.timeout_s) + " s", ""});
        return;
      }
      if (job->failed) {
        const std::string why = job->error;
        lock.unlock();
        reply_error(res, {500, why, ""});
        return;
      }
    }
    json data = json::array(), per = json::array();
    for (size_t i = 0; i < job->images.size(); ++i) {
      const std::string png = png_bytes(job->pixels[i].data(), image_size, image_size);
      data.push_back({{"b64_json", base64(png)}, {"revised_prompt", job->labels[i]}});
      const ImageStats& s = job->stats[i];
      per.push_back({{"seed", job->images[i].seed},
                     {"image_index", job->images[i].image_index},
                     {"target_forwards", s.target_forwards},
                     {"mean_accepted_length",
                      s.rounds > 0 ? static_cast<double>(s.tokens - 1) / s.rounds : 1.0}});
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    reply(res, 200,
          {{"created", static_cast<int64_t>(std::time(nullptr))},
           {"data", data},
           {"tessera", {{"method", method}, {"seconds", seconds}, {"images", per}}}});
    std::lock_guard lock(mu);
    metrics.observe(seconds);
  }

  std::string metrics_text() {
    std::lock_guard lock(mu);
    std::string t;
    auto line = [&](const std::string& s) { t += s + "\n"; };
    line("# HELP tessera_requests_total HTTP requests answered, by status.");
    line("# TYPE tessera_requests_total counter");
    for (const auto& [code, n] : metrics.requests)
      line("tessera_requests_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(n));
    line("# HELP tessera_queue_images Images waiting for a slot in the batch.");
    line("# TYPE tessera_queue_images gauge");
    line("tessera_queue_images " + std::to_string(waiting));
    line("# HELP tessera_in_flight_images Images being generated.");
    line("# TYPE tessera_in_flight_images gauge");
    line("tessera_in_flight_images " + std::to_string(in_flight.load()));
    line("# HELP tessera_images_total Images generated.");
    line("# TYPE tessera_images_total counter");
    line("tessera_images_total " + std::to_string(metrics.images));
    line("# HELP tessera_tokens_total Image tokens generated (rate(): tokens/s).");
    line("# TYPE tessera_tokens_total counter");
    line("tessera_tokens_total " + std::to_string(metrics.tokens));
    line(
        "# HELP tessera_mean_accepted_length Tokens per target forward after an image's first, "
        "by method.");
    line("# TYPE tessera_mean_accepted_length gauge");
    char buf[64];
    std::snprintf(
        buf, sizeof buf, "%.6g",
        metrics.rounds > 0 ? static_cast<double>(metrics.accepted) / metrics.rounds : 0.0);
    line("tessera_mean_accepted_length{method=\"" + method + "\"} " + buf);
    line("# HELP tessera_request_seconds Time from a generation request to its response.");
    line("# TYPE tessera_request_seconds histogram");
    int64_t cum = 0;
    for (size_t b = 0; b <= std::size(Metrics::kBuckets); ++b) {
      cum += metrics.latency[b];
      std::string le = "+Inf";
      if (b < std::size(Metrics::kBuckets)) {
        std::snprintf(buf, sizeof buf, "%g", Metrics::kBuckets[b]);
        le = buf;
      }
      line("tessera_request_seconds_bucket{le=\"" + le + "\"} " + std::to_string(cum));
    }
    std::snprintf(buf, sizeof buf, "%.6f", metrics.latency_sum);
    line(std::string("tessera_request_seconds_sum ") + buf);
    line("tessera_request_seconds_count " + std::to_string(metrics.latency_count));
    return t;
  }

  void routes() {
    http.set_payload_max_length(o.max_body);
    http.new_task_queue = [n = o.http_threads] { return new httplib::ThreadPool(n); };
    http.Post("/v1/images/generations",
              [this](const httplib::Request& q, httplib::Response& r) { generations(q, r); });
    http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) {
      reply(r, 200,
            {{"object", "list"},
             {"data", json::array({{{"id", model_id},
                                    {"object", "model"},
                                    {"owned_by", "tessera"},
                                    {"tessera", {{"method", method}, {"size", image_size}}}}})}});
    });
    http.Get("/health", [this](const httplib::Request&, httplib::Response& r) {
      bool down;
      {
        std::lock_guard lock(mu);
        down = stopping;
      }
      reply(r, down ? 503 : 200, {{"status", down ? "stopping" : "ok"}});
    });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
      if (r.status == 413)
        reply_error(r, {413, "the body is over " + std::to_string(o.max_body) + " bytes", ""});
      else if (r.status == 404)
        reply_error(r, {404, "no route " + q.method + " " + q.path, ""});
    });
    http.set_exception_handler(
        [this](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          reply_error(r, {500, what, ""});
        });
  }
};

Server::Server(Pipeline& pipe, ServeOptions options)
    : impl_(std::make_unique<Impl>(pipe, std::move(options))) {
  impl_->routes();
}

Server::~Server() {
  stop();
}

int Server::bind() {
  Impl& s = *impl_;
  const int port = s.o.port == 0 ? s.http.bind_to_any_port(s.o.host)
                                 : (s.http.bind_to_port(s.o.host, s.o.port) ? s.o.port : -1);
  if (port < 0)
    throw Error("cannot listen on " + s.o.host + ":" + std::to_string(s.o.port) +
                " (in use, or not an address of this machine)");
  return port;
}

void Server::run() {
  Impl& s = *impl_;
  std::thread engine([&s] { s.engine(); });
  s.http.listen_after_bind();
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
    for (auto& job : s.queue) job->failed = true, job->error = "the server is shutting down";
    s.waiting = 0;
    s.queue.clear();
    s.done_cv.notify_all();
    s.engine_cv.notify_all();
  }
  engine.join();
}

void Server::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
    s.engine_cv.notify_all();
  }
  s.http.stop();
}

}  // namespace tessera::serve
