#include "engine.h"

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
#include <set>
#include <thread>

#include "metrics.h"
#include "request.h"
#include "tessera/class_names.h"
#include "tessera/error.h"
#include "tessera/generation.h"
#include "tessera/image_io.h"
#include "tessera/log.h"

namespace tessera::serve {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A streamed image's previews are made at most this often (each is a VQ decode on the engine).
constexpr auto kPreviewEvery = std::chrono::milliseconds(200);
// How often a waiting request checks that its client is still there, and a stream with nothing
// to send writes a comment (which fails once the client has gone).
constexpr auto kClientCheckEvery = std::chrono::milliseconds(250);

std::string base64(const std::string& bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3), '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

json error_body(const std::string& message, const std::string& type, const std::string& param) {
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", param.empty() ? json() : json(param)},
            {"code", json()}}}};
}

std::string sse(const std::string& event, const json& data) {
  return "event: " + event + "\ndata: " + data.dump() + "\n\n";
}

double mean_accepted(const ImageStats& s) {
  return s.rounds > 0 ? static_cast<double>(s.tokens - 1) / s.rounds : 1.0;
}

// As a request passes them back (request.cpp) and a run's stats give them.
json costs_json(const DraftCosts& c) {
  return {{"draft_step", c.draft_step}, {"verify", c.verify}};
}

// One setting's Generation, and the images of it in flight: generation id -> (job, image).
struct Lane {
  std::unique_ptr<Generation> gen;
  std::map<int, std::pair<std::shared_ptr<Job>, size_t>> live;
};

}  // namespace

struct Engine::Impl {
  Pipeline& pipe;
  ServeOptions o;
  std::optional<ClassNames> names;
  std::string model_id;
  int image_size = 0, grid = 0;

  mutable std::mutex mu;
  std::condition_variable engine_cv, done_cv;
  std::deque<std::shared_ptr<Job>> queue;  // jobs with images not yet added
  size_t waiting = 0;                      // images queued, not added
  bool stopping = false;
  Metrics metrics;
  std::atomic<int> in_flight{0}, settings{0}, joined_settings{0};
  // The engine's alone (no lock): a Generation per setting that opened one, ...
  std::map<std::string, Lane> lanes;
  // ... and the settings whose requests join another's batch (Generation::joins: a method that
  // drafts as the lane's does, its own rule per image) -> that lane's key.
  std::map<std::string, std::string> joined;
  // Settings that joined none of the lanes open when last tried (cleared when a lane opens).
  std::set<std::string> unjoinable;
  std::thread thread;

  Impl(Pipeline& p, ServeOptions opts) : pipe(p), o(std::move(opts)) {
    const ModelConfig& mc = pipe.config();
    if (ClassNames::present(o.model_dir)) names = ClassNames::load(o.model_dir, mc.gpt.num_classes);
    std::filesystem::path dir = std::filesystem::path(mc.dir).lexically_normal();
    if (dir.filename().empty()) dir = dir.parent_path();  // "models/emoji/target/"
    model_id = dir.filename().string();
    image_size = pipe.image_size();
    grid = mc.gpt.grid;
  }

  RequestContext context() const {
    return {o, pipe.config(), names ? &*names : nullptr, image_size};
  }

  // ---- the engine thread -----------------------------------------------------------------------
  void engine() {
    for (;;) {
      std::vector<std::shared_ptr<Job>> to_open;
      {
        std::unique_lock lock(mu);
        drop_cancelled();
        admit(to_open);
        int busy = 0;
        for (auto& [key, lane] : lanes) busy += lane.gen->in_flight();
        in_flight = busy;
        settings = static_cast<int>(lanes.size());
        joined_settings = static_cast<int>(joined.size());
        if (busy == 0 && to_open.empty()) {
          if (stopping && queue.empty()) return;
          engine_cv.wait(lock);
          continue;
        }
      }
      for (const auto& job : to_open) open_lane(*job);
      if (!to_open.empty()) continue;  // admit into the new lanes first
      for (auto it = lanes.begin(); it != lanes.end();) {
        Lane& lane = it->second;
        try {
          if (lane.gen->in_flight() > 0) {
            lane.gen->step();
            finish(lane);
            stream_progress(lane);
          }
          ++it;
        } catch (const std::exception& e) {
          // A fault fails that setting's requests in flight (500) and drops its Generation; the
          // other settings and later requests go on.
          std::lock_guard lock(mu);
          for (auto& [id, entry] : lane.live)
            entry.first->fail(500, std::string("generation failed: ") + e.what());
          metrics.engine_faults++;
          it = erase_lane(it);
          done_cv.notify_all();
        }
      }
    }
  }

  // Cancelled jobs (timed out, or their client gone) give their slots back now.
  void drop_cancelled() {
    for (auto& [key, lane] : lanes)
      for (auto it = lane.live.begin(); it != lane.live.end();) {
        if (it->second.first->cancelled) {
          lane.gen->cancel(it->first);
          it = lane.live.erase(it);
        } else {
          ++it;
        }
      }
    for (auto it = queue.begin(); it != queue.end();)
      if ((*it)->cancelled || (*it)->failed) {
        waiting -= (*it)->images.size() - (*it)->added;
        it = queue.erase(it);
      } else {
        ++it;
      }
  }

  // The lane a setting's requests go to: its own or the one it joined; lanes.end() if none.
  std::map<std::string, Lane>::iterator lane_of(const std::string& settings) {
    const auto j = joined.find(settings);
    return lanes.find(j == joined.end() ? settings : j->second);
  }

  std::map<std::string, Lane>::iterator erase_lane(std::map<std::string, Lane>::iterator it) {
    std::erase_if(joined, [&](const auto& j) { return j.second == it->first; });
    return lanes.erase(it);
  }

  bool room_for_a_lane() {
    return static_cast<int>(lanes.size()) < std::max(o.max_settings, 1) || evict_idle_lane();
  }

  // Adds queued images to their setting's batch while it has room, first come first served. A job
  // whose setting has no lane yet is returned in `to_open` (to join a lane, or open one); when
  // max_settings lanes are busy and it joins none of them, no later job is admitted, so the lanes
  // drain and the waiting setting gets one.
  void admit(std::vector<std::shared_ptr<Job>>& to_open) {
    for (auto it = queue.begin(); it != queue.end();) {
      Job& job = **it;
      auto lane = lane_of(job.settings);
      if (lane == lanes.end()) {
        if (std::none_of(to_open.begin(), to_open.end(),
                         [&](const auto& j) { return j->settings == job.settings; })) {
          const bool may_join = !lanes.empty() && !unjoinable.count(job.settings);
          if (!may_join &&
              static_cast<int>(lanes.size() + to_open.size()) >= std::max(o.max_settings, 1) &&
              !evict_idle_lane())
            return;
          to_open.push_back(*it);
        }
        ++it;
        continue;
      }
      while (job.added < job.images.size() && lane->second.gen->capacity() > 0) {
        const size_t i = job.added;
        int id;
        try {
          id = lane->second.gen->add(job.images[i]);
        } catch (const ParameterError& e) {  // a sampling setting the engine refuses
          job.fail(400, e.what(), e.param());
          done_cv.notify_all();
          break;
        }
        job.added++;
        lane->second.live[id] = {*it, i};
        waiting--;
      }
      if (job.failed) {  // its images added so far are cancelled with it
        job.cancelled = true;
        waiting -= job.images.size() - job.added;
        it = queue.erase(it);
        continue;
      }
      it = job.added == job.images.size() ? queue.erase(it) : std::next(it);
    }
  }

  bool evict_idle_lane() {
    for (auto it = lanes.begin(); it != lanes.end(); ++it)
      if (it->second.gen->in_flight() == 0) {
        erase_lane(it);
        return true;
      }
    return false;
  }

  // The lane a job's images can join (its method drafting as the lane's does, its sampling shaped
  // alike), or "". Throws the ParameterError of a method the model refuses.
  std::string joinable_lane(const Job& job) {
    if (o.separate_methods) return "";
    for (auto& [key, lane] : lanes)
      if (lane.gen->joins(job.images.front())) return key;
    return "";
  }

  // The default setting's Generation, started before the first request, and the other served
  // methods' after it (their drafters loaded and tables built; a --draft-len auto calibration
  // measured and cached), each kept as a batch while there is room (ServeOptions::max_settings).
  // Their keys are the ones a request naming only the method gets.
  void warm_up() {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string own = o.gen.spec.method;
    std::vector<std::string> methods = {own};
    for (const std::string& m : served_methods(o))
      if (m != own) methods.push_back(m);
    for (const std::string& m : methods) {
      json body = pipe.config().gpt.is_c2i() ? json{{"class", 0}} : json{{"prompt", "a"}};
      if (m != own) body["method"] = m;
      std::shared_ptr<Job> job;
      try {
        job = parse_request(body.dump(), context());
      } catch (const HttpError& e) {
        throw Error("serve: the " + (m == own ? std::string("default setting") : "method " + m) +
                    " cannot run: " + e.message);
      }
      pipe.validate(job->opts);
      if (m != own) {  // a method drafting as a started one's joins its batch
        const std::string key = joinable_lane(*job);
        if (!key.empty()) {
          std::lock_guard lock(mu);
          joined[job->settings] = key;
          continue;
        }
      }
      auto gen = pipe.start_generation(job->opts);
      std::lock_guard lock(mu);
      if (m == own || static_cast<int>(lanes.size()) < std::max(o.max_settings, 1))
        lanes[job->settings].gen = std::move(gen);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char took[128];
    std::snprintf(took, sizeof took, "%.2f s (%zu method%s, %zu batches kept, %zu joining them)", s,
                  methods.size(), methods.size() == 1 ? "" : "s", lanes.size(), joined.size());
    log_info(std::string("serve: the served methods started in ") + took);
  }

  // Joins a job's setting to a lane's batch, or starts a Generation of its own when there is room
  // (outside the lock: it may load a draft model, build a rule's tables). A setting the engine
  // refuses fails every queued job that asked for it, 400 with the message.
  void open_lane(const Job& job) {
    int status = 400;
    std::string why, param;
    try {
      pipe.validate(job.opts);
      if (!unjoinable.count(job.settings)) {
        const std::string key = joinable_lane(job);
        std::lock_guard lock(mu);
        if (!key.empty()) {
          joined[job.settings] = key;
          return;
        }
        unjoinable.insert(job.settings);
      }
      {
        std::lock_guard lock(mu);
        if (!room_for_a_lane()) return;  // it waits in the queue for a lane to drain
      }
      auto gen = pipe.start_generation(job.opts);
      std::lock_guard lock(mu);
      lanes[job.settings].gen = std::move(gen);
      unjoinable.clear();  // they may join this one
      return;
    } catch (const ParameterError& e) {
      // Named as the request names it: the costs are its draft_costs, the hold its draft_hold.
      auto spell = [](const std::string& s) {
        return s == "auto_costs" ? "draft_costs" : s == "auto_hold" ? "draft_hold" : s;
      };
      why = e.message(spell);
      param = spell(e.param());
    } catch (const Error& e) {
      why = e.what();
    } catch (const std::exception& e) {
      status = 500;
      why = std::string("the engine could not start: ") + e.what();
    }
    std::lock_guard lock(mu);
    for (auto& j : queue)
      if (j->settings == job.settings) j->fail(status, why, param);
    drop_cancelled();
    done_cv.notify_all();
  }

  // Finished images go to their requests' HTTP threads, which decode them (threads may share
  // the Pipeline), so the engine goes on stepping meanwhile.
  void finish(Lane& lane) {
    for (FinishedImage& f : lane.gen->poll()) {
      auto it = lane.live.find(f.id);
      if (it == lane.live.end()) continue;
      auto [job_ptr, i] = it->second;
      lane.live.erase(it);
      Job& job = *job_ptr;
      std::lock_guard lock(mu);
      job.tokens[i] = std::move(f.tokens);
      job.stats[i] = f.stats;
      job.draft_costs = lane.gen->stats().draft_costs;
      job.draft_hold = lane.gen->stats().draft_hold;
      job.done++;
      if (job.stream) job.events.push_back({"", static_cast<int>(i)});
      metrics.images++;
      metrics.tokens += f.stats.tokens;
      Metrics::Acceptance& a = metrics.by_method[job.opts.spec.method];
      a.rounds += f.stats.rounds;
      a.accepted += f.stats.tokens - 1;
      done_cv.notify_all();
    }
  }

  // A streamed image's event: its pixels so far, tokens and acceptance map; a finished one's
  // with its batch's draft_len "auto" costs and hold (`costs`, `hold`, when it chose by them).
  json image_event(const Job& job, size_t i, const std::vector<uint8_t>& px, const ImageStats& s,
                   const DraftCosts* costs = nullptr, int hold = 0) const {
    const int64_t total = static_cast<int64_t>(grid) * grid;
    std::vector<int> depth(s.accepted_depth.begin(), s.accepted_depth.end());
    const bool done = s.tokens >= total;
    json event = {{"type", done ? "image_generation.completed" : "image_generation.partial_image"},
                  {"b64_json", base64(png_bytes(px.data(), image_size, image_size))},
                  {"created_at", static_cast<int64_t>(std::time(nullptr))},
                  {"size", std::to_string(image_size) + "x" + std::to_string(image_size)},
                  {"output_format", "png"},
                  {"revised_prompt", job.labels[i]},
                  {"tessera",
                   {{"image", i},
                    {"seed", job.images[i].seed},
                    {"method", job.opts.spec.method},
                    {"tokens", s.tokens},
                    {"total", total},
                    {"accepted_depth", depth},
                    {"target_forwards", s.target_forwards},
                    {"mean_accepted_length", mean_accepted(s)},
                    {"seconds", std::chrono::duration<double>(Clock::now() - job.start).count()}}}};
    if (costs && !costs->verify.empty()) event["tessera"]["draft_costs"] = costs_json(*costs);
    if (costs && !costs->verify.empty() && hold > 0) event["tessera"]["draft_hold"] = hold;
    return event;
  }

  // Previews of the streamed images in flight, each at most every kPreviewEvery.
  void stream_progress(Lane& lane) {
    const auto now = Clock::now();
    for (auto& [id, entry] : lane.live) {
      Job& job = *entry.first;
      const size_t i = entry.second;
      if (!job.stream || now - job.previewed[i] < kPreviewEvery) continue;
      const ImageStats s = lane.gen->image_stats(id);
      if (s.tokens == 0) continue;  // not prefilled yet
      job.previewed[i] = now;
      const std::string event =
          sse("image_generation.partial_image", image_event(job, i, lane.gen->preview(id), s));
      std::lock_guard lock(mu);
      job.events.push_back({event});
      done_cv.notify_all();
    }
  }

  // ---- answers ---------------------------------------------------------------------------------
  void count(int status) {
    std::lock_guard lock(mu);
    metrics.requests[status]++;
  }
  Reply reply(int status, const json& body) {
    count(status);
    return {status, body.dump()};
  }
  Reply reply_error(const HttpError& e) {
    const std::string type = e.status >= 500 ? "server_error" : "invalid_request_error";
    return reply(e.status, error_body(e.message, type, e.param));
  }

  // Queues a job, or says why not (shutting down, the queue full).
  std::optional<HttpError> enqueue(const std::shared_ptr<Job>& job) {
    std::lock_guard lock(mu);
    if (stopping) return HttpError{503, "the server is shutting down", ""};
    if (waiting + job->images.size() > static_cast<size_t>(o.queue)) {
      return HttpError{
          429, "the queue is full (" + std::to_string(o.queue) + " images waiting); retry later",
          ""};
    }
    queue.push_back(job);
    waiting += job->images.size();
    engine_cv.notify_one();
    return std::nullopt;
  }

  Clock::time_point deadline(const Job& job) const {
    return job.start +
           std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_s));
  }

  void cancel(Job& job) {  // with mu held
    job.cancelled = true;  // the engine frees its slots at the next step
    engine_cv.notify_one();
  }

  // POST /v1/images/generations, answered when done.
  Reply generations(const std::string& body, const std::function<bool()>& client_gone,
                    std::shared_ptr<Job>* stream_job) {
    std::shared_ptr<Job> job;
    try {
      job = parse_request(body, context());
    } catch (const HttpError& e) {
      return reply_error(e);
    }
    if (job->stream && !stream_job)
      return reply_error(
          {400, "stream: streamed answers are tessera serve's alone; drop it", "stream"});
    job->start = Clock::now();
    if (auto e = enqueue(job)) {
      Reply r = reply_error(*e);
      if (e->status == 429) r.headers["Retry-After"] = "1";
      return r;
    }
    if (job->stream) {
      *stream_job = job;
      count(200);
      return {200, "", "text/event-stream", {{"Cache-Control", "no-cache"}}};
    }
    std::unique_lock lock(mu);
    while (!job->complete()) {
      const auto until = std::min(deadline(*job), Clock::now() + kClientCheckEvery);
      if (done_cv.wait_until(lock, until, [&] { return job->complete(); })) break;
      if (Clock::now() >= deadline(*job)) {
        cancel(*job);
        lock.unlock();
        return reply_error({503, "timed out after " + std::to_string(o.timeout_s) + " s", ""});
      }
      if (!client_gone) continue;
      lock.unlock();
      const bool gone = client_gone();
      lock.lock();
      if (gone && !job->complete()) {
        cancel(*job);
        metrics.disconnects++;
        metrics.requests[499]++;
        return {499, ""};  // nobody reads it
      }
    }
    if (job->failed) {
      const HttpError e{job->error_status, job->error, job->error_param};
      lock.unlock();
      return reply_error(e);
    }
    lock.unlock();
    json data = json::array(), per = json::array();
    for (size_t i = 0; i < job->images.size(); ++i) {
      const std::vector<uint8_t> px = pipe.decode(job->tokens[i], 1);
      const std::string png = png_bytes(px.data(), image_size, image_size);
      data.push_back({{"b64_json", base64(png)}, {"revised_prompt", job->labels[i]}});
      const ImageStats& s = job->stats[i];
      per.push_back({{"seed", job->images[i].seed},
                     {"image_index", job->images[i].image_index},
                     {"target_forwards", s.target_forwards},
                     {"mean_accepted_length", mean_accepted(s)}});
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - job->start).count();
    json tessera = {{"method", job->opts.spec.method}, {"seconds", seconds}, {"images", per}};
    if (!job->draft_costs.verify.empty()) tessera["draft_costs"] = costs_json(job->draft_costs);
    if (!job->draft_costs.verify.empty() && job->draft_hold > 0)
      tessera["draft_hold"] = job->draft_hold;
    Reply r = reply(200, {{"created", static_cast<int64_t>(std::time(nullptr))},
                          {"data", data},
                          {"tessera", tessera}});
    std::lock_guard g(mu);
    metrics.observe(seconds);
    return r;
  }

  // "stream": true: Server-Sent Events in the shape of OpenAI's streamed image generation
  // (image_generation.partial_image while it is generated, image_generation.completed per image;
  // "error" if it fails). A write that fails means the client has gone: its images are cancelled.
  bool stream_events(const std::shared_ptr<Job>& job,
                     const std::function<bool(const std::string&)>& write) {
    std::unique_lock lock(mu);
    done_cv.wait_for(lock, kClientCheckEvery,
                     [&] { return !job->events.empty() || job->complete(); });
    std::deque<Job::Event> queued = std::move(job->events);
    job->events.clear();
    bool end = job->complete() && queued.empty();
    std::vector<std::string> events;
    std::vector<std::pair<size_t, ImageStats>> finished;  // decoded below, unlocked
    const DraftCosts costs = job->draft_costs;
    const int hold = job->draft_hold;
    for (Job::Event& e : queued)
      if (e.finished >= 0) {
        finished.push_back({static_cast<size_t>(e.finished), job->stats[e.finished]});
        events.emplace_back();  // its place in the order
      } else {
        events.push_back(std::move(e.text));
      }
    if (!job->complete() && Clock::now() >= deadline(*job)) {
      cancel(*job);
      job->fail(503, "timed out after " + std::to_string(o.timeout_s) + " s");
    }
    if (job->failed) {
      events.push_back(sse(
          "error", error_body(job->error,
                              job->error_status >= 500 ? "server_error" : "invalid_request_error",
                              job->error_param)));
      end = true;
    }
    lock.unlock();
    size_t next = 0;
    for (std::string& e : events)
      if (e.empty() && next < finished.size()) {
        const auto& [i, stats] = finished[next++];
        e = sse("image_generation.completed",
                image_event(*job, i, pipe.decode(job->tokens[i], 1), stats, &costs, hold));
      }
    if (events.empty() && !end) events.push_back(": waiting\n\n");
    for (const std::string& e : events)
      if (!write(e)) {
        lock.lock();
        cancel(*job);
        metrics.disconnects++;
        return false;
      }
    if (end) {
      lock.lock();
      metrics.observe(std::chrono::duration<double>(Clock::now() - job->start).count());
      return false;
    }
    return true;
  }

  json models() const {
    json classes = json::array();
    if (names)
      for (int c = 0; c < pipe.config().gpt.num_classes; ++c) classes.push_back(names->label(c));
    return {{"object", "list"},
            {"data", json::array({{{"id", model_id},
                                   {"object", "model"},
                                   {"owned_by", "tessera"},
                                   {"tessera",
                                    {{"method", o.gen.spec.method},
                                     {"methods", served_methods(o)},
                                     {"size", image_size},
                                     {"grid", grid},
                                     {"classes", classes}}}}})}};
  }
};

Engine::Engine(Pipeline& pipe, ServeOptions options)
    : impl_(std::make_unique<Impl>(pipe, std::move(options))) {}

Engine::~Engine() {
  stop();
  join();
}

void Engine::warm_up() {
  impl_->warm_up();
}

void Engine::start() {
  if (!impl_->thread.joinable()) impl_->thread = std::thread([this] { impl_->engine(); });
}

void Engine::stop() {
  Impl& s = *impl_;
  std::lock_guard lock(s.mu);
  s.stopping = true;
  for (auto& job : s.queue) job->fail(503, "the server is shutting down");
  s.waiting = 0;
  s.queue.clear();
  s.done_cv.notify_all();
  s.engine_cv.notify_all();
}

void Engine::join() {
  if (impl_->thread.joinable()) impl_->thread.join();
}

Reply Engine::generations(const std::string& body, const std::function<bool()>& client_gone,
                          std::shared_ptr<Job>* stream_job) {
  return impl_->generations(body, client_gone, stream_job);
}

bool Engine::stream_events(const std::shared_ptr<Job>& job,
                           const std::function<bool(const std::string&)>& write) {
  return impl_->stream_events(job, write);
}

void Engine::stream_closed(const std::shared_ptr<Job>& job) {
  std::lock_guard lock(impl_->mu);
  if (!job->complete()) impl_->cancel(*job);
}

Reply Engine::models() {
  impl_->count(200);
  return {200, impl_->models().dump()};
}

Reply Engine::health() {
  bool down;
  {
    std::lock_guard lock(impl_->mu);
    down = impl_->stopping;
  }
  Reply r{down ? 503 : 200, json{{"status", down ? "stopping" : "ok"}}.dump()};
  impl_->count(r.status);
  return r;
}

Reply Engine::metrics() {
  Impl& s = *impl_;
  std::lock_guard lock(s.mu);
  return {200,
          s.metrics.text(static_cast<int64_t>(s.waiting), s.in_flight.load(), s.settings.load(),
                         s.joined_settings.load()),
          "text/plain; version=0.0.4"};
}

void Engine::count(int status) {
  impl_->count(status);
}

Reply Engine::error(int status, const std::string& message, const std::string& param) {
  return impl_->reply_error({status, message, param});
}

}  // namespace tessera::serve
