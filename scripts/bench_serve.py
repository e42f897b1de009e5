#!/usr/bin/python3
"""Serving throughput of `tessera serve` (docs/serving.md) on loopback, bounded.

For each method (default: vanilla and sd) and each mode -- "one-at-a-time" (a server with -b 1)
and "batched" (-b 16) -- one server is started, warmed up with 2 requests, then driven at each
client count (default 1, 4, 8, 16): C client threads each POST /v1/images/generations
{"prompt", "n": 1, "seed"} one after another until the level's request budget (--requests,
default 32) is spent. Every level sends the same requests (prompts rotating over a few class
names, seeds 1000, 1001, ... distinct per request), so levels, modes and methods do the same work.
images/s = requests / the level's wall time; latency is per request (connect to the whole body
read). Prints a markdown table and, per method, images/s(batched, 8 clients) / images/s(one-at-a-
time, 1 client) against the 3x target. Any non-200 answer or a server exit fails the run (one
line, exit status 1); servers are always stopped (SIGTERM, then waited for), also on Ctrl-C.

--mix A,B,C instead measures methods that draft alike (docs/serving.md) in one server: requests
rotate over the methods, and a "shared" server (their requests in one batch, each image verified
by its own method) is compared with a "separate" one (--separate-methods: a batch per method,
stepped in turn), both -b 16; it prints images/s(shared) / images/s(separate) per client count.

Python 3 standard library only. Usually run through scripts/bench-serve.sh.
"""

import argparse
import base64
import ctypes
import http.client
import json
import math
import os
import platform
import queue
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPTS = ["red apple", "banana", "cat face", "carrot", "croissant", "pizza"]
MODES = [("one-at-a-time", 1), ("batched", 16)]
TARGET_RATIO = 3.0
TARGET_CLIENTS = 8


class BenchError(Exception):
    pass


def log(msg):
    print(f"[bench-serve] {msg}", file=sys.stderr, flush=True)


# ---- the server --------------------------------------------------------------------------------


def _die_with_parent():
    # Linux: the server gets SIGTERM if this script dies without its finally (SIGKILL).
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def exit_text(status):
    return f"was killed by signal {-status}" if status < 0 else f"exited with status {status}"


class ServerProcess:
    """`tessera serve --port 0 ...`, its address read from the line it prints on stdout."""

    def __init__(self, binary, args, name, logger=None):
        self.name = name
        self.logger = logger or log
        self.log = tempfile.NamedTemporaryFile(prefix="tessera-serve-", suffix=".log", delete=False)
        self.cmd = [binary, "serve", "--port", "0"] + args
        self.logger(f"{name}: starting {' '.join(self.cmd)} (server log {self.log.name})")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=self.log,
                                     stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        self.host = self.port = None

    def wait_listening(self, start_timeout):
        lines = queue.Queue()

        def read_stdout():
            for raw in self.proc.stdout:
                lines.put(raw.decode(errors="replace").rstrip("\n"))
            lines.put(None)

        threading.Thread(target=read_stdout, daemon=True).start()
        name = self.name
        deadline = time.monotonic() + start_timeout
        while self.port is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{name}: the server printed no address in {start_timeout:g} s")
            try:
                line = lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                self.proc.wait()
                raise BenchError(f"{name}: the server {exit_text(self.proc.returncode)} "
                                 f"before listening: {self.log_tail()}")
            if line.startswith("listening on http://"):
                hostport = line[len("listening on http://"):].strip().rstrip("/")
                self.host, port = hostport.rsplit(":", 1)
                self.port = int(port)
        self.logger(f"{name}: listening on {self.host}:{self.port} (pid {self.proc.pid})")

    def alive(self):
        return self.proc.poll() is None

    def log_tail(self, n=3):
        try:
            with open(self.log.name, errors="replace") as f:
                tail = [l.strip() for l in f.read().splitlines() if l.strip()][-n:]
            return " | ".join(tail) or "(empty log)"
        except OSError:
            return "(no log)"

    def stop(self, timeout=120):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.logger(f"{self.name}: no exit {timeout} s after SIGTERM; killing it")
                self.proc.kill()
                self.proc.wait()
        status = self.proc.returncode
        self.log.close()
        if status == 0:  # a clean exit: its log is of no further use
            try:
                os.unlink(self.log.name)
            except OSError:
                pass
        return status


# ---- requests ----------------------------------------------------------------------------------


def generate(host, port, prompt, seed, timeout, method=None):
    """One POST /v1/images/generations (n=1) on its own connection: its latency in seconds."""
    ask = {"prompt": prompt, "n": 1, "seed": seed}
    if method:
        ask["method"] = method
    body = json.dumps(ask).encode()
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        # A connection per request: cpp-httplib serves a kept-alive connection on one of its few
        # threads, so keep-alive would tie up a server thread between a client's requests.
        conn.request("POST", "/v1/images/generations", body,
                     {"Content-Type": "application/json", "Connection": "close"})
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    latency = time.perf_counter() - t0
    if resp.status != 200:
        raise BenchError(f"POST prompt={prompt!r} seed={seed}: HTTP {resp.status}: "
                         f"{data[:200].decode(errors='replace')}")
    try:
        images = json.loads(data)["data"]
        png = base64.b64decode(images[0]["b64_json"]) if len(images) == 1 else b""
        ok = png[:8] == b"\x89PNG\r\n\x1a\n"
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise BenchError(f"POST prompt={prompt!r} seed={seed}: a 200 without one PNG image")
    return latency


def percentile(xs, p):
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    k = (len(s) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def run_level(server, clients, requests, timeout, mix=None):
    """`requests` requests from `clients` threads (request i names method mix[i % len(mix)] when
    given); returns (wall seconds, latencies)."""
    lock = threading.Lock()
    nxt = [0]
    latencies = [None] * requests
    errors = []
    stop = threading.Event()

    def client():
        while not stop.is_set():
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= requests:
                return
            prompt, seed = PROMPTS[i % len(PROMPTS)], 1000 + i
            try:
                method = mix[i % len(mix)] if mix else None
                latencies[i] = generate(server.host, server.port, prompt, seed, timeout, method)
            except Exception as e:  # noqa: BLE001 -- any failure ends the level
                with lock:
                    errors.append(e)
                stop.set()
                return

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(timeout=0.5)
            if not server.alive():
                stop.set()
    wall = time.perf_counter() - t0
    if not server.alive():
        raise BenchError(f"{server.name}: the server {exit_text(server.proc.returncode)} "
                         f"during the {clients}-client level: {server.log_tail()}")
    if errors:
        e = errors[0]
        msg = str(e) if isinstance(e, BenchError) else f"{type(e).__name__}: {e}"
        raise BenchError(f"{server.name}, {clients} clients: {msg}")
    return wall, latencies


# ---- main --------------------------------------------------------------------------------------


def parse_list(text, conv=str):
    items = [conv(x.strip()) for x in text.split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError("an empty list")
    return items


def with_server(a, args, name, servers, body):
    """Starts `tessera serve ARGS`, runs body(server), and stops it; a server that exits, or exits
    non-zero when stopped, raises BenchError with the tail of its log."""
    server = ServerProcess(a.binary, args, name)
    servers.append(server)
    try:
        server.wait_listening(a.start_timeout)
        body(server)
    except Exception as e:
        if not server.alive():
            raise BenchError(f"{server.name}: the server {exit_text(server.proc.returncode)}: "
                             f"{server.log_tail()}") from e
        raise
    finally:
        status = server.stop()
        servers.remove(server)
        log(f"{server.name}: stopped (exit status {status})")
    if status != 0:
        raise BenchError(f"{server.name}: the server {exit_text(status)} "
                         f"when stopped (log {server.log.name}): {server.log_tail()}")


def guarded(measure):
    """measure(servers) with every failure as one line and an exit status (0 when it ran); the
    servers it left running are stopped."""
    servers = []
    try:
        measure(servers)
        return 0
    except BenchError as e:
        print(f"bench-serve: error: {e}", file=sys.stderr)
        return 1
    except (ConnectionError, OSError, http.client.HTTPException) as e:
        print(f"bench-serve: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("bench-serve: interrupted", file=sys.stderr)
        return 130
    finally:
        for s in servers:  # only if stopping it in with_server was itself interrupted
            s.stop(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", "-m", default=os.path.join(REPO, "models/emoji/target"))
    ap.add_argument("--methods", type=parse_list, default=["vanilla", "sd"],
                    help="comma-separated methods (default vanilla,sd)")
    ap.add_argument("--mix", type=parse_list,
                    help="comma-separated methods that draft alike, measured shared vs separate")
    ap.add_argument("--clients", type=lambda s: parse_list(s, int), default=[1, 4, 8, 16],
                    help="comma-separated client counts (default 1,4,8,16)")
    ap.add_argument("--requests", type=int, default=32, help="requests per level (default 32)")
    ap.add_argument("--threads", "-t", type=int, help="passed to serve as -t")
    ap.add_argument("--json-out", help="write every number to this JSON file")
    ap.add_argument("--binary", default=os.environ.get("TESSERA_BIN",
                                                      os.path.join(REPO, "build/tessera")),
                    help="the tessera binary (default build/tessera, or $TESSERA_BIN)")
    ap.add_argument("--start-timeout", type=float, default=600.0,
                    help="seconds a server may take to listen (default 600)")
    ap.add_argument("--request-timeout", type=float, default=1800.0,
                    help="socket timeout of one request in seconds (default 1800)")
    a = ap.parse_args()
    if a.requests < 1 or any(c < 1 for c in a.clients):
        ap.error("--requests and --clients must be positive")
    if not os.access(a.binary, os.X_OK):
        ap.error(f"no executable tessera at {a.binary} (build it, or pass --binary)")

    if a.mix:
        return run_mix(a)
    levels = []

    def measure(servers):
        for method in a.methods:
            for mode, batch in MODES:
                args = ["-m", a.model, "--method", method, "-b", str(batch)]
                if a.threads:
                    args += ["-t", str(a.threads)]

                def levels_of(server):
                    for w in range(2):  # warm-up: seeds 0 and 1, outside the measured ones
                        generate(server.host, server.port, PROMPTS[w], w, a.request_timeout)
                    log(f"{server.name}: warmed up")
                    for clients in a.clients:
                        wall, lat = run_level(server, clients, a.requests, a.request_timeout)
                        lv = {"method": method, "mode": mode, "batch": batch, "clients": clients,
                              "requests": a.requests, "wall_s": wall,
                              "images_per_s": a.requests / wall,
                              "p50_s": percentile(lat, 50), "p99_s": percentile(lat, 99),
                              "mean_s": statistics.fmean(lat), "latencies_s": lat}
                        levels.append(lv)
                        log(f"{method} {mode} (-b {batch}), {clients:2d} clients: {a.requests} "
                            f"requests in {wall:.2f} s = {lv['images_per_s']:.3f} images/s, "
                            f"p50 {lv['p50_s']:.3f} s, p99 {lv['p99_s']:.3f} s")

                with_server(a, args, f"{method} {mode}", servers, levels_of)

    status = guarded(measure)
    if status != 0:
        return status

    # ---- the report ----
    base = {}
    for lv in levels:
        if lv["mode"] == "one-at-a-time" and lv["clients"] == 1:
            base[lv["method"]] = lv["images_per_s"]
    for lv in levels:
        b = base.get(lv["method"])
        lv["speedup"] = lv["images_per_s"] / b if b else None
    model = os.path.relpath(a.model, REPO) if a.model.startswith(REPO + os.sep) else a.model
    print(f"tessera serve, {model}, {a.requests} requests (n=1) per level, loopback, "
          f"{os.cpu_count()} CPUs"
          + (f", -t {a.threads}" if a.threads else ""))
    print()
    print("| method | mode | clients | images/s | p50 s | p99 s | speed-up |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for lv in levels:
        su = f"{lv['speedup']:.2f}x" if lv["speedup"] is not None else "n/a"
        print(f"| {lv['method']} | {lv['mode']} (-b {lv['batch']}) | {lv['clients']} | "
              f"{lv['images_per_s']:.3f} | {lv['p50_s']:.3f} | {lv['p99_s']:.3f} | {su} |")
    print()
    print("speed-up: against the same method's one-at-a-time server at 1 client.")
    targets = []
    for method in a.methods:
        hi = next((lv for lv in levels if lv["method"] == method and lv["mode"] == "batched"
                   and lv["clients"] == TARGET_CLIENTS), None)
        b = base.get(method)
        if hi is None or b is None:
            print(f"{method}: batched at {TARGET_CLIENTS} clients / one-at-a-time at 1 client: "
                  f"not measured (needs client counts 1 and {TARGET_CLIENTS})")
            targets.append({"method": method, "ratio": None, "target": TARGET_RATIO, "met": None})
            continue
        r = hi["images_per_s"] / b
        met = r >= TARGET_RATIO
        print(f"{method}: batched at {TARGET_CLIENTS} clients / one-at-a-time at 1 client = "
              f"{r:.2f}x (target {TARGET_RATIO:g}x): {'met' if met else 'missed'}")
        targets.append({"method": method, "ratio": r, "target": TARGET_RATIO, "met": met})

    if a.json_out:
        out = {"model": a.model, "binary": a.binary, "methods": a.methods, "clients": a.clients,
               "requests_per_level": a.requests, "threads": a.threads,
               "modes": {m: b for m, b in MODES}, "prompts": PROMPTS,
               "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
               "levels": levels, "targets": targets}
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)
        log(f"wrote {a.json_out}")
    return 0


def run_mix(a):
    """--mix: one server with the methods sharing batches, one with a batch per method."""
    levels = []
    mix = a.mix

    def measure(servers):
        for mode, extra in (("separate", ["--separate-methods"]), ("shared", [])):
            args = ["-m", a.model, "--method", mix[0], "--methods", ",".join(mix), "-b", "16"]
            args += extra + (["-t", str(a.threads)] if a.threads else [])

            def levels_of(server):
                for w, m in enumerate(mix):  # warm-up: every method once, seeds below the measured
                    generate(server.host, server.port, PROMPTS[w % len(PROMPTS)], w,
                             a.request_timeout, m)
                log(f"{server.name}: warmed up")
                for clients in a.clients:
                    wall, lat = run_level(server, clients, a.requests, a.request_timeout, mix)
                    lv = {"mode": mode, "clients": clients, "requests": a.requests,
                          "wall_s": wall, "images_per_s": a.requests / wall,
                          "p50_s": percentile(lat, 50), "p99_s": percentile(lat, 99),
                          "latencies_s": lat}
                    levels.append(lv)
                    log(f"mix {mode}, {clients:2d} clients: {a.requests} requests in {wall:.2f} s "
                        f"= {lv['images_per_s']:.3f} images/s, p99 {lv['p99_s']:.3f} s")

            with_server(a, args, f"mix {mode}", servers, levels_of)

    status = guarded(measure)
    if status != 0:
        return status
    model = os.path.relpath(a.model, REPO) if a.model.startswith(REPO + os.sep) else a.model
    print(f"tessera serve --mix {','.join(mix)}, {model}, {a.requests} requests (n=1) per level "
          f"rotating over the methods, -b 16, loopback, {os.cpu_count()} CPUs"
          + (f", -t {a.threads}" if a.threads else ""))
    print()
    print("| clients | separate images/s | shared images/s | shared / separate | "
          "separate p99 s | shared p99 s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for clients in a.clients:
        sep = next(lv for lv in levels if lv["mode"] == "separate" and lv["clients"] == clients)
        sh = next(lv for lv in levels if lv["mode"] == "shared" and lv["clients"] == clients)
        print(f"| {clients} | {sep['images_per_s']:.3f} | {sh['images_per_s']:.3f} | "
              f"{sh['images_per_s'] / sep['images_per_s']:.2f}x | {sep['p99_s']:.3f} | "
              f"{sh['p99_s']:.3f} |")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"model": a.model, "mix": mix, "clients": a.clients,
                       "requests_per_level": a.requests, "threads": a.threads,
                       "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                       "levels": levels}, f, indent=1)
        log(f"wrote {a.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
