// tessera serve's engine without its HTTP layer (issues 44, 46): requests are parsed
// (request.h), queued, batched into Generations that one engine thread steps (continuous
// batching across requests, and across methods that draft alike), and answered as JSON.
// tools/serve/server.h puts it behind cpp-httplib; the Python package's ServeEngine (tools/python)
// behind Ray Serve's HTTP proxy, so both answer with the same parser, batching and bodies.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "server.h"

namespace tessera::serve {

// An HTTP answer in the front-end's terms.
struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::map<std::string, std::string> headers;  // e.g. Retry-After on 429

  Reply() = default;
  Reply(int status_, std::string body_, std::string content_type_ = "application/json",
        std::map<std::string, std::string> headers_ = {})
      : status(status_),
        body(std::move(body_)),
        content_type(std::move(content_type_)),
        headers(std::move(headers_)) {}
};

struct Job;

class Engine {
 public:
  // The pipeline must outlive the engine; the engine thread is its only generating user.
  Engine(Pipeline& pipe, ServeOptions options);
  ~Engine();  // stop(), then waits for the engine thread
  // ServeOptions::warm_up's part: starts the default setting's batch, then every other served
  // method's (drafters loaded, tables built): joining a started batch where it drafts alike, else
  // a batch of its own while max_settings allows. Throws Error when one cannot start.
  void warm_up();
  // Starts the engine thread (once).
  void start();
  // Refuses new requests (503), answers the queued ones 503 and lets the images in flight finish;
  // the engine thread returns once they have. From any thread.
  void stop();
  // Waits for the engine thread after stop().
  void join();

  // POST /v1/images/generations: blocks until the images are done, the request times out (503),
  // or client_gone() (asked every 250 ms) says the client has left (499, its slots freed). A body
  // with "stream": true is answered 400 unless stream_job is given: then the queued job is
  // returned there (with a 200 Reply) for the front-end to stream with stream_events().
  Reply generations(const std::string& body, const std::function<bool()>& client_gone = {},
                    std::shared_ptr<Job>* stream_job = nullptr);
  // A streamed job's events since the last call (waiting up to 250 ms for one), written through
  // write() in order; false from write() means the client has gone (its images are cancelled).
  // Returns false once the stream has ended (the last event written, or the client gone).
  bool stream_events(const std::shared_ptr<Job>& job,
                     const std::function<bool(const std::string&)>& write);
  // The stream of a job ended, written in full or not: its images, if any, are cancelled.
  void stream_closed(const std::shared_ptr<Job>& job);

  Reply models();   // GET /v1/models
  Reply health();   // GET /health: 200 {"status": "ok"}, 503 while stopping
  Reply metrics();  // GET /metrics (Prometheus text)
  // Counts an answer the front-end made itself (its page) in the metrics.
  void count(int status);
  // An answer made by the front-end (404, 413, a fault): counted in the metrics, JSON error body.
  Reply error(int status, const std::string& message, const std::string& param = "");

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
