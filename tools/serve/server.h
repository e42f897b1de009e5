// `tessera serve` (issue 44): an OpenAI-style images API over one Pipeline. One engine thread
// owns the Pipeline and a Generation (include/tessera/generation.h) per distinct setting (method
// and its parameters; guidance on or off; greedy or not) and steps them; HTTP threads parse
// requests and queue their images, so every request in flight with the same setting shares each
// batched target forward (continuous batching across requests), each image with its own request's
// sampling values (guidance scale, temperature, top-k, top-p). A bounded queue answers 429 when
// full; a request past its timeout, or whose client has gone, is cancelled and its slots freed at
// the next step.
//
//   POST /v1/images/generations  {"prompt": "red apple", "n": 2, "seed": 7, "size": "256x256",
//                                 "response_format": "b64_json", "method": "lantern",
//                                 "params": {"lantern.k": 10}, "stream": false} (or "class": 3
//                                 for models without class names) -> {"created", "data":
//                                 [{"b64_json", "revised_prompt"}], "tessera": {seeds, stats}};
//                                 "stream": true answers Server-Sent Events with previews
//   GET / (a live page), GET /v1/models, GET /health, GET /metrics (Prometheus text)
// Errors are JSON ({"error": {"message", "type", "param"}}): 4xx for the request's fault, 5xx
// for the server's.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "tessera/tessera.h"

namespace tessera::serve {

struct ServeOptions {
  std::string model_dir;  // for the class names of prompts and the model's id
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (bind() returns it)
  GenerateOptions gen;  // the default method and sampling settings; batch: images at once, each
                        // setting
  // Methods a request may name, each with the draft model directory it drafts with ("": none, or
  // Jacobi drafts); empty: gen's alone. A method other than gen's runs with its defaults.
  std::map<std::string, std::string> methods;
  int max_settings = 4;           // batches at once; settings whose methods draft alike share one
  bool separate_methods = false;  // true: every setting a batch of its own (an ablation)
  int queue = 64;             // images waiting beyond the batch; a request that would pass it: 429
  double timeout_s = 600.0;   // a request not done by then: 503, and its images cancelled
  size_t max_body = 1 << 16;  // bytes of a request body; more: 413
  int max_n = 16;             // images per request
  int http_threads = 0;       // 0: queue + batch * max_settings + 8 (at most 256)
  // bind() starts the default setting's batch (its draft loaded, a --draft-len auto calibration
  // measured or read from the cache), then every other served method's (its drafter loaded, its
  // tables built; up to max_settings batches kept), so a first request waits for none of it.
  bool warm_up = true;
};

class Server {
 public:
  // The pipeline must outlive the server; the server's engine thread is its only user.
  Server(Pipeline& pipe, ServeOptions options);
  ~Server();
  // Binds the listening socket and, with ServeOptions::warm_up, starts the default setting's
  // batch; returns the port (the one asked for, or the one found for 0). Throws Error when it
  // cannot bind or the default setting cannot start.
  int bind();
  // Serves until stop(): blocks. The engine finishes the requests in flight, then returns.
  void run();
  // From any thread (or a signal-watching one): stops accepting, answers the queued requests
  // 503, and makes run() return once the images in flight are done.
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::serve
