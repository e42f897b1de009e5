// One POST /v1/images/generations: its body parsed and checked into the images it asks for and the
// settings they are generated with (tools/serve/server.h). Requests with equal settings share a
// batch, and so do settings whose methods draft alike (Generation::joins); the others each have a
// Generation of their own.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "server.h"
#include "tessera/class_names.h"
#include "tessera/generation.h"

namespace tessera::serve {

// A request's fault: answered with `status` and an OpenAI-style error body.
struct HttpError {
  int status;
  std::string message, param;
};

// One request's images, shared by its HTTP thread and the engine (under the server's mutex).
struct Job {
  GenerateOptions opts;  // this request's method, its parameters and sampling settings
  std::string settings;  // its method's as canonical text: the key of the Generation it joins
                         // (the sampling is each image's own, GenerationRequest::sampling)
  bool stream = false;   // answered as Server-Sent Events with previews
  std::vector<GenerationRequest> images;
  std::vector<std::string> labels;
  std::vector<std::vector<int32_t>> tokens;  // each finished image's grid (decoded by its
                                             // HTTP thread, not the engine's)
  std::vector<ImageStats> stats;
  // The draft_len "auto" costs its batch chose by (calibrated once per batch, or the request's):
  // answered so that a client can pass them back and skip the calibration.
  DraftCosts draft_costs;
  int draft_hold = 0;  // and the rounds it held a chosen length for (GenerateStats::draft_hold)
  size_t added = 0, done = 0;
  bool cancelled = false, failed = false;
  int error_status = 500;
  std::string error, error_param;
  std::chrono::steady_clock::time_point start;
  // stream: events not yet written, and when each image's last preview was made. An event is its
  // text ("event: ...\ndata: ...\n\n"), or the index of a finished image, whose event the
  // HTTP thread makes (it decodes the image).
  struct Event {
    std::string text;
    int finished = -1;
  };
  std::deque<Event> events;
  std::vector<std::chrono::steady_clock::time_point> previewed;

  bool complete() const { return failed || done == images.size(); }
  void fail(int status, const std::string& why, const std::string& param = "") {
    failed = true;
    error_status = status;
    error = why;
    error_param = param;
  }
};

// What a request is checked against.
struct RequestContext {
  const ServeOptions& options;
  const ModelConfig& config;
  const ClassNames* names;  // null: the model has no class names
  int image_size;
};

// The job a request body asks for; throws HttpError naming the field at fault.
std::shared_ptr<Job> parse_request(const std::string& body, const RequestContext& context);

// The methods a request may name: ServeOptions::methods, or the server's own when that is empty.
std::vector<std::string> served_methods(const ServeOptions& options);

}  // namespace tessera::serve
