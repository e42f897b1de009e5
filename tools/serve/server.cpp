#include "server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <memory>
#include <string>

#include "client_gone.h"
#include "engine.h"
#include "tessera/error.h"
#include "web_page.h"

namespace tessera::serve {

namespace {

void send(httplib::Response& res, const Reply& r) {
  res.status = r.status;
  for (const auto& [k, v] : r.headers) res.set_header(k, v);
  if (r.status != 499) res.set_content(r.body, r.content_type);
}

}  // namespace

struct Server::Impl {
  ServeOptions o;
  Engine engine;
  httplib::Server http;
  int listen_fd = -1;

  Impl(Pipeline& p, ServeOptions opts) : o(opts), engine(p, std::move(opts)) {}

  void generations(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Job> job;
    const Reply r = engine.generations(
        req.body, [&req] { return client_gone(req.remote_addr, req.remote_port, req.local_port); },
        &job);
    if (!job) {
      send(res, r);
      return;
    }
    res.status = r.status;
    for (const auto& [k, v] : r.headers) res.set_header(k, v);
    // A streamed answer: its events as the engine makes them.
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, job](size_t, httplib::DataSink& sink) {
          bool gone = false;
          const bool more = engine.stream_events(job, [&](const std::string& e) {
            gone = !sink.write(e.data(), e.size());
            return !gone;
          });
          if (gone) return false;
          if (!more) sink.done();
          return true;
        },
        [this, job](bool) { engine.stream_closed(job); });
  }

  void routes() {
    http.set_payload_max_length(o.max_body);
    // Every request waiting for its images holds an HTTP thread: enough threads for the queue and
    // every batch, and a few for /health and /metrics, so that requests reach the 429 logic
    // rather than wait unseen in the pool's own queue.
    const int threads =
        o.http_threads > 0 ? o.http_threads
                           : std::min(256, o.queue + o.gen.batch * std::max(o.max_settings, 1) + 8);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    // cpp-httplib 0.11 listens with a backlog of 5, so a burst of clients gets connections reset:
    // keep the listening socket to listen again with the system's backlog after bind().
    http.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_fd = sock;
    });
    http.Get("/", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(web_page(), "text/html; charset=utf-8");
      engine.count(200);
    });
    http.Post("/v1/images/generations",
              [this](const httplib::Request& q, httplib::Response& r) { generations(q, r); });
    http.Get("/v1/models",
             [this](const httplib::Request&, httplib::Response& r) { send(r, engine.models()); });
    http.Get("/health",
             [this](const httplib::Request&, httplib::Response& r) { send(r, engine.health()); });
    http.Get("/metrics",
             [this](const httplib::Request&, httplib::Response& r) { send(r, engine.metrics()); });
    http.set_error_handler([this](const httplib::Request& q, httplib::Response& r) {
      if (r.status == 413)
        send(r, engine.error(413, "the body is over " + std::to_string(o.max_body) + " bytes"));
      else if (r.status == 404)
        send(r, engine.error(404, "no route " + q.method + " " + q.path));
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
          send(r, engine.error(500, what));
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
  if (s.listen_fd >= 0) ::listen(s.listen_fd, SOMAXCONN);  // Linux: a second listen() resizes it
  if (s.o.warm_up) s.engine.warm_up();
  return port;
}

void Server::run() {
  Impl& s = *impl_;
  s.engine.start();
  s.http.listen_after_bind();
  s.engine.stop();
  s.engine.join();
}

void Server::stop() {
  Impl& s = *impl_;
  s.engine.stop();
  s.http.stop();
}

}  // namespace tessera::serve
