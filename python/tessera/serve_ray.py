"""tessera serve's engine scaled out on Ray Serve (issue 46): N replicas, each a
tessera.ServeEngine (the same request parser, continuous batching and JSON answers as
`tessera serve`), behind Ray's HTTP proxy with the same paths:

    POST /v1/images/generations   GET /v1/models   GET /health   GET /metrics

Ray routes each request to a replica; inside a replica the requests in flight share the engine's
batched forwards. /health and /metrics are those of the replica that answered (every answer
names it in the header X-Tessera-Replica), so /metrics is per replica, not the cluster's total.
"stream": true is answered 400 (streaming is `tessera serve`'s alone).

    python -m tessera.serve_ray -m models/emoji/target --replicas 2 --port 8000

or from Python (a Ray cluster running; `serve.run` deploys it):

    from ray import serve
    from tessera.serve_ray import build_app
    serve.run(build_app("models/emoji/target", replicas=2), name="tessera", route_prefix="/")

`app_builder` is the same for Ray Serve config files and KubeRay's RayService
(import_path: tessera.serve_ray:app_builder, args: build_app's keywords); docs/serving.md.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

import ray
from ray import serve
from starlette.requests import Request
from starlette.responses import Response

APP_NAME = "tessera"
REPLICA_HEADER = "X-Tessera-Replica"

# ServeEngine's keywords, with its defaults (build_app passes only these to it).
ENGINE_DEFAULTS: dict[str, Any] = dict(method="vanilla", draft=None, methods="all", batch=4,
                                       queue=64, timeout_s=600.0, max_n=16, max_body=65536,
                                       max_settings=4, separate_methods=False, warm_up=True)


def _error_body(message: str) -> str:
    # The engine's error shape, for the answers made here (unknown route, body too large).
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": None, "code": None}})


@serve.deployment(name="TesseraEngine")
class TesseraReplica:
    """One ServeEngine: the model loaded once, its engine thread batching every request that
    this replica has in flight."""

    def __init__(self, model_dir: str, engine_options: dict, max_ongoing: int):
        # Imported here, in the replica's process, so that this module (and build_app, run by
        # the driver or Ray's controller) imports without the compiled extension.
        from tessera import ServeEngine
        self._engine = ServeEngine(model_dir, **engine_options)
        self._max_body = engine_options["max_body"]
        self._replica = serve.get_replica_context().replica_id.unique_id
        # generations() blocks (GIL released) until its images are done; each request waiting
        # holds a thread, so the pool has one per request Ray may send here. asyncio.to_thread's
        # default pool (min(32, cores + 4) threads: 6 on 2 cores) would cap the engine's batch.
        self._pool = ThreadPoolExecutor(max_workers=max_ongoing,
                                        thread_name_prefix="tessera-generations")

    def _answer(self, status: int, body: str, headers: Optional[dict] = None,
                media_type: str = "application/json") -> Response:
        return Response(body, status_code=status, media_type=media_type,
                        headers={**(headers or {}), REPLICA_HEADER: self._replica})

    async def __call__(self, request: Request) -> Response:
        path = request.url.path
        root = request.scope.get("root_path", "")  # a route_prefix other than "/"
        if root and path.startswith(root):
            path = path[len(root):] or "/"
        route = (request.method, path.rstrip("/") or "/")
        if route == ("POST", "/v1/images/generations"):
            body = await request.body()
            if len(body) > self._max_body:  # tessera serve's HTTP layer checks it, not the engine
                return self._answer(413, _error_body(f"the body is over {self._max_body} bytes"))
            # In a worker thread, so this replica's event loop keeps taking requests and the
            # engine batches them.
            loop = asyncio.get_running_loop()
            status, text, headers = await loop.run_in_executor(self._pool,
                                                               self._engine.generations, body)
            return self._answer(status, text, headers)
        if route == ("GET", "/v1/models"):
            return self._answer(*self._engine.models())
        if route == ("GET", "/health"):
            return self._answer(*self._engine.health())
        if route == ("GET", "/metrics"):
            return self._answer(200, self._engine.metrics(),
                                media_type="text/plain; version=0.0.4")
        return self._answer(404, _error_body(f"no route {request.method} {path}"))

    def check_health(self) -> None:
        # Ray Serve calls this periodically; raising restarts the replica.
        status, body = self._engine.health()
        if status != 200:
            raise RuntimeError(f"tessera engine unhealthy: {status} {body}")

    def __del__(self) -> None:
        # Ray Serve calls __del__ at a graceful shutdown, after the requests in flight have been
        # answered (or graceful_shutdown_timeout_s): queued ones get 503.
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.stop()


def _cluster_gpus() -> float:
    return ray.cluster_resources().get("GPU", 0) if ray.is_initialized() else 0


def build_app(model_dir: str, *, replicas: int = 1, autoscale: Optional[tuple] = None,
              device: str = "auto", cpus: float = 1, threads: Optional[int] = None,
              max_ongoing: Optional[int] = None, **engine: Any) -> serve.Application:
    """The bound Ray Serve application: `replicas` ServeEngines on model_dir (a path that every
    node running a replica must have).

    autoscale: (min, max) replicas scaled on queue depth (target: `batch` requests in flight per
      replica, a full batch) instead of a fixed count.
    device: "auto" (cuda and one GPU per replica when the cluster has GPUs, else cpu), "cpu",
      "cuda" or "cuda:N" (a cuda device reserves one GPU per replica).
    cpus: Ray CPUs reserved per replica; threads: the engine's CPU threads (default: cpus,
      at least 1, so replicas packed on a node do not oversubscribe it).
    max_ongoing: requests Ray sends to one replica at once (default: batch + queue, what the
      engine holds before answering 429 to one-image requests); more wait in Ray's router.
    engine: ServeEngine's keywords (method, draft, methods, batch, queue, timeout_s, max_n,
      max_body, max_settings, separate_methods, warm_up).
    """
    unknown = set(engine) - set(ENGINE_DEFAULTS)
    if unknown:
        raise TypeError(f"build_app: unknown options {', '.join(sorted(unknown))}")
    options = {**ENGINE_DEFAULTS, **{k: v for k, v in engine.items() if v is not None}}
    if options["batch"] < 1 or options["queue"] < 0:
        raise ValueError("build_app: batch must be >= 1 and queue >= 0")
    if device == "auto":
        device = "cuda" if _cluster_gpus() > 0 else "cpu"
    if not (device == "cpu" or device == "cuda" or device.startswith("cuda:")):
        raise ValueError(f"build_app: device must be auto, cpu, cuda or cuda:N, not {device!r}")
    if cpus <= 0:
        raise ValueError("build_app: cpus must be > 0")
    options["device"] = device
    options["threads"] = threads if threads is not None else max(1, int(cpus))
    max_ongoing = max_ongoing or options["batch"] + options["queue"]
    actor = {"num_cpus": cpus}
    if device != "cpu":
        actor["num_gpus"] = 1  # one replica per GPU: the engine uses its device alone
    settings: dict[str, Any] = dict(ray_actor_options=actor, max_ongoing_requests=max_ongoing)
    if autoscale:
        low, high = autoscale
        if not 0 <= low <= high or high < 1:
            raise ValueError(f"build_app: autoscale needs 0 <= min <= max, max >= 1: {autoscale}")
        settings["autoscaling_config"] = {"min_replicas": low, "max_replicas": high,
                                          "initial_replicas": max(low, 1),
                                          "target_ongoing_requests": options["batch"]}
    else:
        if replicas < 1:
            raise ValueError("build_app: replicas must be >= 1")
        settings["num_replicas"] = replicas
    return TesseraReplica.options(**settings).bind(os.fspath(model_dir), options, max_ongoing)


def app_builder(args: dict) -> serve.Application:
    """For Ray Serve config files and KubeRay (import_path: tessera.serve_ray:app_builder):
    args are build_app's keywords, model_dir among them; autoscale as "MIN:MAX"."""
    args = dict(args)
    if isinstance(args.get("autoscale"), str):
        args["autoscale"] = _min_max(args["autoscale"])
    return build_app(args.pop("model_dir"), **args)


def _min_max(text: str) -> tuple:
    low, sep, high = text.partition(":")
    if not sep or not low.isdigit() or not high.isdigit():
        raise ValueError(f"autoscale must be MIN:MAX, not {text!r}")
    return int(low), int(high)


def _deploy_error(e: Exception) -> str:
    # serve.run's exception says only that the deployment failed; the replica's exception (the
    # engine's message) ends the deployment's status message.
    try:
        for d in serve.status().applications[APP_NAME].deployments.values():
            if d.message.strip():
                return d.message.strip().splitlines()[-1]
    except Exception:
        pass
    return _last_line(e)


def _last_line(e: Exception) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[-1]


def _check_methods(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    # Method names are checked here, when the package is importable, so that a typo is one line
    # rather than every replica's traceback; the rest (drafts, models) is the replicas' to check.
    try:
        import tessera
        known = {m["name"] for m in tessera.methods() if m["tokens"] != "continuous"}
    except (ImportError, AttributeError):
        return
    asked = [a.method] if a.method else []
    if a.methods and a.methods != "all":
        asked += [m.strip() for m in a.methods.split(",")]
    for m in asked:
        if m not in known:
            p.error(f"{m}: not a LlamaGen method ({', '.join(sorted(known))})")


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, not the usage block
        self.exit(2, f"serve_ray: {message}\n")


def main(argv: Optional[list] = None) -> int:
    p = _Parser(prog="python -m tessera.serve_ray",
                description="tessera serve's engine on Ray Serve: N replicas behind Ray's HTTP "
                            "proxy (docs/serving.md)")
    p.add_argument("-m", "--model", required=True, help="model directory (on every node)")
    p.add_argument("--replicas", type=int, default=1, help="replicas (default 1)")
    p.add_argument("--autoscale", metavar="MIN:MAX", help="scale on queue depth instead")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port (0: a free one)")
    p.add_argument("--address", default="local",
                   help="Ray cluster: local (start one here, the default), auto (the one "
                        "`ray start` runs on this machine), or HOST:PORT / ray://HOST:PORT")
    p.add_argument("--device", default="auto", help="auto (cuda if the cluster has GPUs), "
                                                     "cpu, cuda or cuda:N")
    p.add_argument("--cpus", type=float, default=1, help="Ray CPUs per replica (default 1)")
    p.add_argument("-t", "--threads", type=int, help="engine threads (default: --cpus)")
    p.add_argument("--method", help="default method (vanilla)")
    p.add_argument("--draft", help="the default method's draft model directory, or none")
    p.add_argument("--methods", help="methods a request may name, comma-separated (all)")
    p.add_argument("-b", "--batch", type=int, help="images at once per batch, per replica (4)")
    p.add_argument("--queue", type=int, help="images waiting beyond the batch, per replica (64)")
    p.add_argument("--timeout", type=float, dest="timeout_s", help="seconds per request (600)")
    p.add_argument("--max-n", type=int, help="images per request (16)")
    p.add_argument("--max-body", type=int, help="bytes of a request body (65536)")
    p.add_argument("--max-settings", type=int,
                   help="batches at once (4; methods that draft alike share one)")
    p.add_argument("--separate-methods", action="store_true", default=None,
                   help="a batch per method setting, even where methods draft alike")
    p.add_argument("--max-ongoing", type=int, help="requests at once per replica "
                                                   "(default: batch + queue)")
    a = p.parse_args(argv)

    if not 0 <= a.port <= 65535:
        p.error(f"--port {a.port}: not a port")
    for name in ("replicas", "batch", "max_n", "max_body", "max_settings", "max_ongoing"):
        if getattr(a, name) is not None and getattr(a, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    if a.queue is not None and a.queue < 0:
        p.error("--queue must be >= 0")
    if a.cpus <= 0 or (a.threads is not None and a.threads < 0):
        p.error("--cpus must be > 0 and --threads >= 0")
    autoscale = None
    if a.autoscale:
        try:
            autoscale = _min_max(a.autoscale)
        except ValueError as e:
            p.error(str(e))
    _check_methods(p, a)
    # A ray:// driver may run where the model is not; every other one runs on a cluster node.
    if not a.address.startswith("ray://") and not os.path.isfile(
            os.path.join(a.model, "config.json")):
        p.error(f"{a.model}: not a model directory (no config.json)")

    started = a.address == "local"
    try:
        ray.init(address=a.address)
    except Exception as e:  # no cluster at that address, most often
        sys.stderr.write(f"serve_ray: Ray at {a.address}: {_last_line(e)}\n")
        return 1
    try:
        # Ray's proxy listens where the cluster's Serve was first started; joining a cluster
        # that already runs Serve keeps its address (Ray then warns that http_options changed).
        port = a.port or _free_port(a.host)
        serve.start(http_options={"host": a.host, "port": port})
        engine = {k: getattr(a, k) for k in ENGINE_DEFAULTS if getattr(a, k, None) is not None}
        try:
            app = build_app(a.model, replicas=a.replicas, autoscale=autoscale, device=a.device,
                            cpus=a.cpus, threads=a.threads, max_ongoing=a.max_ongoing, **engine)
        except ValueError as e:
            p.error(str(e))
        t0 = time.monotonic()
        try:
            serve.run(app, name=APP_NAME, route_prefix="/")
        except Exception as e:  # a replica that could not start: the engine's error, in short
            sys.stderr.write(f"serve_ray: deployment failed: {_deploy_error(e)}\n")
            return 1
        count = f"{autoscale[0]}..{autoscale[1]}" if autoscale else str(a.replicas)
        print(f"tessera on Ray Serve: http://{a.host}:{port} ({count} replicas, ready in "
              f"{time.monotonic() - t0:.1f} s); Ctrl-C stops", flush=True)
        # SIGTERM (a container's stop) shuts down as Ctrl-C does.
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        # The queued requests are answered 503, those in flight finish (each replica's __del__).
        if started:
            serve.shutdown()
        else:
            serve.delete(APP_NAME)  # the cluster (and its Serve) goes on without this app
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
