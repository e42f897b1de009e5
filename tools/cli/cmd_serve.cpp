// tessera serve: an OpenAI-style images API over one model (tools/serve/server.h): each request
// runs with the server's method and sampling settings or its own, batched with the others in
// flight that share them.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <thread>

#include "../serve/server.h"
#include "commands.h"
#include "common.h"
#include "default_model.h"
#include "method_flags.h"
#include "tessera/log.h"
#include "tessera/methods.h"

namespace tessera::cli {

namespace {

std::atomic<bool> g_stop{false};  // set by SIGINT/SIGTERM
static_assert(std::atomic<bool>::is_always_lock_free,
              "a signal handler may only use lock-free atomics");

struct ServeArgs {
  CommonOpts common;
  GenerateOptions gen;
  serve::ServeOptions serve;
  std::string methods = "all";
  std::string text_encoder;  // a t2i model's T5 encoder (LoadOptions::text_encoder)
};

int run_serve(ServeArgs& a, const CLI::App& cmd) {
  if (a.common.model.empty()) a.common.model = default_model_dir();
  apply_common(a.common);
  if (is_mar(a.common.model)) throw Error("serve is for LlamaGen models (discrete tokens)");
  const std::string method = a.gen.spec.method;
  check_method_flags(cmd, {method}, false, "--method");
  const std::string draft_flag = a.gen.spec.draft_model;
  const DrafterChoice dc = choose_drafter(a.common.model, {method}, draft_flag);
  a.gen.spec.draft_model = method_draft_dir(a.common.model, method, draft_flag, dc);
  apply_model_sampling_defaults(load_model_config(a.common.model).sampling, cmd, a.gen.sampling);
  LoadOptions lo;
  lo.threads = a.common.threads;
  lo.check_weights = a.common.check_weights;
  lo.device = a.common.device;
  lo.text_encoder = a.text_encoder;
  auto pipe = Pipeline::load(a.common.model, lo);
  // A t2i model answers typed prompts: its text encoder loads now (a missing or mismatched one
  // is one error line here, not a failure at the first request).
  if (!pipe->config().gpt.is_c2i())
    pipe->text_condition("a photo");
  else if (!a.text_encoder.empty())
    throw Error("--text-encoder is for text-conditional (t2i) models; " + a.common.model +
                " is class-conditional");
  // Bad settings fail here, in one line, not at the first request.
  a.serve.methods = serving_methods(a.common.model, a.methods, a.gen, draft_flag, *pipe);
  a.serve.model_dir = a.common.model;
  a.serve.gen = a.gen;
  serve::Server server(*pipe, a.serve);
  const int port = server.bind();
  // SIGINT and SIGTERM stop the server gracefully: the handler (whichever thread it runs on) only
  // sets a flag; a watcher thread sees it and calls stop(). The requests in flight finish, queued
  // ones are answered 503.
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = true; };
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::atomic<bool> done{false};
  std::thread watcher([&] {
    while (!done) {
      if (g_stop.exchange(false)) {
        log_info("serve: stopping (the images in flight finish first)");
        server.stop();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  log_info("serve: " + a.common.model + ", method " + method +
           (a.gen.spec.draft_model.empty() ? "" : " with " + a.gen.spec.draft_model) + " (" +
           std::to_string(a.serve.methods.size()) + " methods served), up to " +
           std::to_string(a.gen.batch) + " images at once per setting");
  // The address on stdout, flushed: scripts and tests read the port from it.
  std::printf("listening on http://%s:%d\n", a.serve.host.c_str(), port);
  std::fflush(stdout);
  server.run();
  done = true;
  watcher.join();
  return 0;
}

}  // namespace

Command add_serve(CLI::App& app, const ModelDefaults& md) {
  auto a = std::make_shared<ServeArgs>();
  a->gen.sampling = md.sampling;
  a->gen.batch = 8;
  auto* s = app.add_subcommand(
      "serve",
      "Serve an OpenAI-style images API (POST /v1/images/generations, GET /v1/models, /health, "
      "/metrics) and a live web page (GET /) for one model, every request batched with the others "
      "in flight that share its settings (docs/serving.md)");
  add_common(s, a->common, /*model_required=*/false);
  add_method_flags(s, a->gen.spec, md);
  s->add_option("--host", a->serve.host, "Address to listen on")->capture_default_str();
  s->add_option("--port", a->serve.port, "Port to listen on (0: any free one, printed)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  s->add_option("-b,--batch", a->gen.batch, "Images generated at once, across requests")
      ->check(int_at_least(1))
      ->capture_default_str();
  s->add_option("--methods", a->methods,
                "Methods a request may ask for (comma-separated), or all: every one this model "
                "can run; --method is the default")
      ->capture_default_str();
  s->add_option("--text-encoder", a->text_encoder,
                "T5 encoder directory of a t2i model's prompts (tools/convert_t5.py); default: "
                "the one its config.json names");
  s->add_option("--max-settings", a->serve.max_settings,
                "Batches generated at once: settings (method, parameters, sampling) whose methods "
                "draft otherwise; methods that draft alike share one")
      ->check(int_at_least(1))
      ->capture_default_str();
  s->add_flag("--separate-methods", a->serve.separate_methods,
              "Give every method setting a batch of its own, even where methods draft alike (an "
              "ablation: scripts/bench-serve.sh --mix)");
  s->add_option("--queue", a->serve.queue,
                "Images waiting beyond the batch before requests are answered 429")
      ->check(int_at_least(0))
      ->capture_default_str();
  s->add_option("--timeout", a->serve.timeout_s,
                "Seconds a request may take; later it is answered 503 and its images cancelled")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--http-threads", a->serve.http_threads,
                "Threads answering HTTP (each waiting request holds one); 0: enough for the queue "
                "and every batch")
      ->check(CLI::Range(0, 4096))
      ->capture_default_str();
  s->add_option("--max-n", a->serve.max_n, "Images one request may ask for (its n)")
      ->check(int_at_least(1))
      ->capture_default_str();
  s->add_option("--max-body", a->serve.max_body, "Bytes of a request body (more: 413)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  s->add_option("--cfg", a->gen.sampling.cfg_scale, "Guidance scale")->capture_default_str();
  s->add_option("--temperature", a->gen.sampling.temperature, "Sampling temperature")
      ->capture_default_str();
  s->add_option("--top-k", a->gen.sampling.top_k, "Top-k")->capture_default_str();
  s->add_option("--top-p", a->gen.sampling.top_p, "Top-p")->capture_default_str();
  return {s, [a, s] { return run_serve(*a, *s); }};
}

}  // namespace tessera::cli
