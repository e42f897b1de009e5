#!/usr/bin/python3
"""A bounded load run against `tessera serve` (docs/serving.md), with checks.

Starts one server (--method, default vanilla; a list such as vanilla,sd makes each request name
one of them, batched apart; -b 16; --queue 256), warms it up with 2*batch per method
requests, then sends --requests N (default 1000) requests from --clients C (default 16) threads,
a mix drawn deterministically from --seed:
  ~80% valid: a class prompt among a few (or, for half of them when GET /v1/models gives the
       class count, "class": one of a few ids drawn from [0, count)), seed in [0, 50), n 1 or 2;
       the sha256 of every image's PNG bytes is recorded by key (prompt or class, seed,
       image_index). 429s are retried after Retry-After (and counted).
  ~10% malformed: invalid JSON, no prompt, n=0, an unknown method, a prompt matching no class,
       a body over 65536 bytes; each must get its 4xx (400, 413) with a JSON error body.
  ~10% disconnects: a valid POST on a raw socket, closed 0.05-0.5 s later without reading.
Checks, each PASS or FAIL: (a) every request answered (no connection errors but the deliberate
disconnects) and GET /health 200 after; (b) no cross-talk: a key requested more than once got
the same bytes every time; (c) repeat-alone: 20 sampled keys requested again one at a time, with
nothing else in flight, equal the load's bytes; (d) memory: VmRSS once idle after the run <=
VmRSS once idle after the warm-up * 1.10 + 16 MiB (the peak during the run reported too);
(e) malformed requests got their 4xx, and no request got a 5xx. Exit status 1 if a check fails,
2 if the run could not be made. Python 3 standard library only.
"""

import argparse
import base64
import hashlib
import http.client
import json
import os
import random
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_serve import REPO, BenchError, ServerProcess, exit_text, percentile  # noqa: E402

PROMPTS = ["red apple", "banana", "cat face", "carrot", "croissant"]
SEED_RANGE = 50
MALFORMED = [  # kind, expected status
    ("invalid_json", 400),
    ("missing_prompt", 400),
    ("n_zero", 400),
    ("unknown_method", 400),
    ("no_match", 400),
    ("too_big", 413),
]
MAX_BODY = 65536  # the server's --max-body default
IDLE_SLACK = 1.10
IDLE_SLACK_BYTES = 16 << 20
REPEAT_KEYS = 20


def log(msg):
    print(f"[serve-load] {msg}", file=sys.stderr, flush=True)


# ---- HTTP on raw sockets (so a refused or cut request is seen as such) ---------------------------


def http_request(host, port, method, path, body=b"", timeout=600.0):
    """One request on its own connection (Connection: close): (status, headers, body bytes).
    The body is sent whole even if the server answers early (a 413 before reading it)."""
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        head = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n"
                + (f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                   if method == "POST" else "") + "\r\n").encode()
        try:
            sock.sendall(head + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may have answered and closed already: read its answer
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        sock.close()


def get_json(host, port, path, timeout=30.0):
    status, _, data = http_request(host, port, "GET", path, timeout=timeout)
    return status, (json.loads(data) if status == 200 else data)


def metrics(host, port):
    status, _, data = http_request(host, port, "GET", "/metrics", timeout=60.0)
    if status != 200:
        raise BenchError(f"GET /metrics: HTTP {status}")
    out = {}
    for line in data.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS in /proc/{pid}/status")


def mib(b):
    return b / (1 << 20)


# ---- the plan ----------------------------------------------------------------------------------


def valid_body(rng, class_ids, methods):
    """A valid request and its key's name; with several methods each request names one (the
    server batches each method apart), and the method is part of the key."""
    n = rng.choice([1, 2])
    seed = rng.randrange(SEED_RANGE)
    if class_ids and rng.random() < 0.5:
        c = rng.choice(class_ids)
        body, who = {"class": c, "n": n, "seed": seed}, f"class:{c}"
    else:
        p = rng.choice(PROMPTS)
        body, who = {"prompt": p, "n": n, "seed": seed}, f"prompt:{p}"
    if len(methods) > 1:
        body["method"] = rng.choice(methods)
        who += f"/{body['method']}"
    return body, who


def malformed_body(kind):
    if kind == "invalid_json":
        return b'{"prompt": "red apple", "n": 1, "seed": '
    body = {"missing_prompt": {"n": 1, "seed": 3},
            "n_zero": {"prompt": "banana", "n": 0, "seed": 3},
            "unknown_method": {"prompt": "banana", "seed": 3, "method": "no-such-method"},
            "no_match": {"prompt": "xyzzy qwerty", "seed": 3},
            "too_big": {"prompt": "banana", "seed": 3, "pad": "x" * (MAX_BODY + 4096)}}[kind]
    return json.dumps(body).encode()


def make_plan(n, seed, num_classes, mix=(80, 10, 10), methods=("vanilla",)):
    """The requests, drawn from `seed`. With a class count, half the valid requests name a class
    id instead of a prompt: one of a few ids drawn from [0, num_classes), so that keys repeat."""
    rng = random.Random(seed)
    class_ids = []
    if num_classes:
        class_ids = rng.sample(range(num_classes), min(len(PROMPTS), num_classes))
    plan, n_bad = [], 0
    total = float(sum(mix))
    p_valid, p_bad = mix[0] / total, (mix[0] + mix[1]) / total
    for i in range(n):
        r = rng.random()
        if r < p_valid:
            body, who = valid_body(rng, class_ids, methods)
            plan.append({"i": i, "kind": "valid", "body": body, "who": who})
        elif r < p_bad:  # the malformed kinds in turn, so a short run has each
            kind, want = MALFORMED[n_bad % len(MALFORMED)]
            n_bad += 1
            plan.append({"i": i, "kind": "malformed", "what": kind, "want": want,
                         "raw": malformed_body(kind)})
        else:
            body, who = valid_body(rng, class_ids, methods)
            plan.append({"i": i, "kind": "disconnect", "body": body, "who": who,
                         "delay": rng.uniform(0.05, 0.5)})
    return plan


# ---- the load ----------------------------------------------------------------------------------


class Load:
    def __init__(self, host, port, timeout):
        self.host, self.port, self.timeout = host, port, timeout
        self.lock = threading.Lock()
        self.hashes = {}  # (who, seed, image_index) -> [(request index, sha256)]
        self.results = {}
        self.count_429 = 0
        self.done = 0
        self.t0 = time.perf_counter()

    def post(self, body):
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        return http_request(self.host, self.port, "POST", "/v1/images/generations", raw,
                            self.timeout)

    def valid(self, item, deadline):
        body = item["body"]
        retries = 0
        while True:
            status, headers, data = self.post(body)
            if status != 429 or time.monotonic() > deadline:
                break
            retries += 1
            with self.lock:
                self.count_429 += 1
            try:
                wait = float(headers.get("retry-after", "1"))
            except ValueError:
                wait = 1.0
            time.sleep(min(max(wait, 0.05), 30.0))
        res = {"status": status, "retries_429": retries}
        if status != 200:
            res["error"] = f"HTTP {status}: {data[:200].decode(errors='replace')}"
            return res
        shas = images_sha(data, body)
        if isinstance(shas, str):
            res["error"] = shas
            return res
        with self.lock:
            for idx, sha in enumerate(shas):
                self.hashes.setdefault((item["who"], body["seed"], idx), []).append(
                    (item["i"], sha))
        return res

    def malformed(self, item):
        status, headers, data = self.post(item["raw"])
        res = {"status": status, "what": item["what"], "want": item["want"]}
        try:
            err = json.loads(data)["error"]
            ok_body = isinstance(err, dict) and isinstance(err.get("message"), str)
        except (ValueError, KeyError, TypeError):
            ok_body = False
        res["json_error_body"] = ok_body
        if status != item["want"] or not ok_body:
            res["error"] = (f"{item['what']}: HTTP {status} (want {item['want']} with a JSON "
                            f"error body): {data[:160].decode(errors='replace')}")
        return res

    def disconnect(self, item):
        raw = json.dumps(item["body"]).encode()
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        try:
            sock.sendall((f"POST /v1/images/generations HTTP/1.1\r\nHost: {self.host}:"
                          f"{self.port}\r\nContent-Type: application/json\r\nContent-Length: "
                          f"{len(raw)}\r\n\r\n").encode() + raw)
            time.sleep(item["delay"])
        finally:
            sock.close()
        return {"status": None, "images": item["body"]["n"]}

    def run_one(self, item, deadline):
        t0 = time.perf_counter()
        try:
            if item["kind"] == "valid":
                res = self.valid(item, deadline)
            elif item["kind"] == "malformed":
                res = self.malformed(item)
            else:
                res = self.disconnect(item)
        except (OSError, http.client.HTTPException) as e:
            res = {"status": None, "connection_error": f"{type(e).__name__}: {e}"}
        res["kind"] = item["kind"]
        res["start_s"] = t0 - self.t0
        res["seconds"] = time.perf_counter() - t0
        with self.lock:
            self.results[item["i"]] = res
            self.done += 1
            return self.done

    def run(self, plan, clients, progress, total_timeout, alive=None):
        """The plan's requests from `clients` threads; stops early once alive() is false."""
        nxt = [0]
        deadline = time.monotonic() + total_timeout
        stop = threading.Event()

        def worker():
            while not stop.is_set():
                with self.lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= len(plan):
                    return
                done = self.run_one(plan[i], deadline)
                if progress and (done % 100 == 0 or done == len(plan)):
                    progress(done)

        threads = [threading.Thread(target=worker, daemon=True) for _ in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            while t.is_alive():
                t.join(timeout=0.5)
                if alive and not alive():
                    stop.set()


def images_sha(data, body):
    """sha256 of each image's PNG bytes of a 200 answer, or a string saying what is wrong."""
    try:
        j = json.loads(data)
        images = j["data"]
        meta = j["tessera"]["images"]
        if len(images) != body["n"] or len(meta) != body["n"]:
            return f"a 200 with {len(images)} images for n={body['n']}"
        out = []
        for idx, (im, m) in enumerate(zip(images, meta)):
            if m.get("seed") != body["seed"] or m.get("image_index") != idx:
                return (f"a 200 whose image {idx} says seed {m.get('seed')}, image_index "
                        f"{m.get('image_index')} (asked seed {body['seed']})")
            png = base64.b64decode(im["b64_json"], validate=True)
            if png[:8] != b"\x89PNG\r\n\x1a\n":
                return f"a 200 whose image {idx} is not a PNG"
            out.append(hashlib.sha256(png).hexdigest())
        return out
    except (ValueError, KeyError, TypeError) as e:
        return f"a 200 with an unreadable body ({type(e).__name__}: {e})"


def wait_idle(host, port, timeout, settle=3):
    """Until /metrics shows no image queued or in flight on `settle` polls in a row."""
    deadline = time.monotonic() + timeout
    calm = 0
    while True:
        m = metrics(host, port)
        idle = m.get("tessera_in_flight_images") == 0 and m.get("tessera_queue_images") == 0
        calm = calm + 1 if idle else 0
        if calm >= settle:
            return m
        if time.monotonic() > deadline:
            raise BenchError(f"the server was not idle {timeout:g} s after the load "
                             f"(in flight {m.get('tessera_in_flight_images')}, queued "
                             f"{m.get('tessera_queue_images')})")
        time.sleep(0.5)


# ---- main --------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])
    ap.add_argument("--model", "-m", default=os.path.join(REPO, "models/emoji/target"))
    ap.add_argument("--method", default="vanilla",
                    help="methods, comma-separated: the first is the server's default; with "
                         "several, each request names one of them")
    ap.add_argument("--batch", "-b", type=int, default=16, help="serve -b (default 16)")
    ap.add_argument("--queue", type=int, default=256, help="serve --queue (default 256)")
    ap.add_argument("--threads", "-t", type=int, help="passed to serve as -t")
    ap.add_argument("--requests", type=int, default=1000)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0, help="the mix's random seed")
    ap.add_argument("--mix", default="80,10,10",
                    help="percentages of valid, malformed and disconnecting requests "
                         "(default 80,10,10)")
    ap.add_argument("--json-out", help="write the results to this JSON file")
    ap.add_argument("--binary", default=os.environ.get("TESSERA_BIN",
                                                      os.path.join(REPO, "build/tessera")))
    ap.add_argument("--start-timeout", type=float, default=600.0)
    ap.add_argument("--request-timeout", type=float, default=1800.0,
                    help="socket timeout of one request in seconds")
    ap.add_argument("--idle-timeout", type=float, default=1800.0,
                    help="seconds to wait for the server to be idle after the load")
    a = ap.parse_args()
    if a.requests < 1 or a.clients < 1 or a.batch < 1:
        ap.error("--requests, --clients and --batch must be positive")
    try:
        mix = tuple(float(x) for x in a.mix.split(","))
        if len(mix) != 3 or min(mix) < 0 or sum(mix) <= 0:
            raise ValueError
    except ValueError:
        ap.error("--mix takes three non-negative percentages, e.g. 80,10,10")
    if not os.access(a.binary, os.X_OK):
        ap.error(f"no executable tessera at {a.binary} (build it, or pass --binary)")

    methods = [m for m in a.method.split(",") if m]
    args = ["-m", a.model, "--method", methods[0], "-b", str(a.batch), "--queue", str(a.queue)]
    if a.threads:
        args += ["-t", str(a.threads)]
    server = ServerProcess(a.binary, args, f"{a.method} -b {a.batch}", logger=log)
    report = {"config": {k: v for k, v in vars(a).items()}, "checks": {}}
    try:
        server.wait_listening(a.start_timeout)
        host, port = server.host, server.port
        pid = server.proc.pid

        status, models = get_json(host, port, "/v1/models")
        num_classes = None
        if status == 200:
            entry = (models.get("data") or [{}])[0]
            for d in (entry, entry.get("tessera") or {}):
                if isinstance(d.get("num_classes"), int) and d["num_classes"] > 0:
                    num_classes = d["num_classes"]
                elif isinstance(d.get("classes"), list) and d["classes"]:
                    num_classes = len(d["classes"])  # the classes' labels, by id
        log(f"/v1/models: HTTP {status}; "
            + (f"{num_classes} classes: prompts and class ids" if num_classes
               else "no class count: prompts only"))

        # Warm-up: 2*batch valid requests (seeds outside the load's), concurrently.
        wrng = random.Random(a.seed + 1)
        # Every method's setting is warmed up (each has its own batch and memory), so that the
        # idle level is the server's with all of them started.
        warm = [{"i": -1 - k, "kind": "valid", "who": f"prompt:{p}",
                 "body": {"prompt": p, "n": 1, "seed": 1000 + k}}
                for k, p in enumerate(wrng.choice(PROMPTS)
                                      for _ in range(2 * a.batch * len(methods)))]
        if len(methods) > 1:
            for k, w in enumerate(warm):
                w["body"]["method"] = methods[k % len(methods)]
                w["who"] += f"/{w['body']['method']}"
        wl = Load(host, port, a.request_timeout)
        t0 = time.perf_counter()
        wl.run(warm, min(a.clients, len(warm)), None, a.request_timeout, server.alive)
        bad = [r for r in wl.results.values() if r.get("status") != 200]
        if not server.alive():
            raise BenchError(f"the server {exit_text(server.proc.returncode)} during the "
                             f"warm-up: {server.log_tail()}")
        if bad:
            raise BenchError(f"warm-up: {len(bad)} of {len(warm)} requests failed, e.g. "
                             f"{bad[0].get('error') or bad[0].get('connection_error')}")
        wait_idle(host, port, a.idle_timeout)
        rss_idle = rss_bytes(pid)
        log(f"warm-up: {len(warm)} requests in {time.perf_counter() - t0:.1f} s; idle VmRSS "
            f"{mib(rss_idle):.1f} MiB")

        # The load, with VmRSS sampled throughout.
        plan = make_plan(a.requests, a.seed, num_classes, mix, methods)
        kinds = {k: sum(1 for p in plan if p["kind"] == k)
                 for k in ("valid", "malformed", "disconnect")}
        log(f"load: {a.requests} requests from {a.clients} clients: {kinds['valid']} valid, "
            f"{kinds['malformed']} malformed, {kinds['disconnect']} disconnects")
        load = Load(host, port, a.request_timeout)
        peak = [rss_idle]
        sampling = threading.Event()

        def sampler():
            while not sampling.is_set():
                try:
                    peak[0] = max(peak[0], rss_bytes(pid))
                except (OSError, BenchError):
                    return
                sampling.wait(0.1)

        st = threading.Thread(target=sampler, daemon=True)
        st.start()
        t_load = time.perf_counter()

        def progress(done):
            with load.lock:
                errs = sum(1 for r in load.results.values()
                           if r.get("error") or r.get("connection_error"))
                n429 = load.count_429
            log(f"{done}/{a.requests} requests, {time.perf_counter() - t_load:.1f} s, "
                f"429s {n429}, failures {errs}, VmRSS peak {mib(peak[0]):.1f} MiB")

        load.run(plan, a.clients, progress, a.request_timeout, server.alive)
        load_s = time.perf_counter() - t_load
        if not server.alive():
            raise BenchError(f"the server {exit_text(server.proc.returncode)} during "
                             f"the load: {server.log_tail()}")
        m_after = wait_idle(host, port, a.idle_timeout)
        sampling.set()
        st.join()
        rss_after = rss_bytes(pid)
        health, _ = get_json(host, port, "/health")
        log(f"load done in {load_s:.1f} s; idle again, VmRSS {mib(rss_after):.1f} MiB "
            f"(peak {mib(peak[0]):.1f} MiB); /health {health}")

        # (c) repeat-alone: sampled keys one at a time, nothing else in flight.
        rrng = random.Random(a.seed + 2)
        keys = sorted(load.hashes)
        sample = rrng.sample(keys, min(REPEAT_KEYS, len(keys)))
        repeat_bad = []
        for who, seed, idx in sample:
            kind, _, value = who.partition(":")
            value, _, method = value.partition("/")  # "prompt:red apple/sd"
            body = {kind: int(value) if kind == "class" else value, "n": idx + 1, "seed": seed}
            if method:
                body["method"] = method
            status, _, data = load.post(body)
            shas = images_sha(data, body) if status == 200 else f"HTTP {status}"
            if isinstance(shas, str):
                repeat_bad.append(f"{who} seed {seed} #{idx}: {shas}")
            else:
                differ = [(i, sha) for i, sha in load.hashes[(who, seed, idx)] if sha != shas[idx]]
                if differ:
                    repeat_bad.append(
                        f"{who} seed {seed} #{idx}: alone {shas[idx][:12]}, in the load "
                        + ", ".join(f"{sha[:12]} (request {i})" for i, sha in differ))
        m_final = metrics(host, port)
    except BenchError as e:
        print(f"serve-load: error: {e}", file=sys.stderr)
        return 2
    except (OSError, http.client.HTTPException) as e:
        print(f"serve-load: error: {type(e).__name__}: {e}"
              + ("" if server.alive() else f" (the server {exit_text(server.proc.returncode)}: "
                 f"{server.log_tail()})"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("serve-load: interrupted", file=sys.stderr)
        return 130
    finally:
        status_exit = server.stop()
        log(f"server stopped (exit status {status_exit})")

    # ---- the checks ----
    res = [load.results[i] for i in range(a.requests)]
    by_kind = {k: [r for r in res if r["kind"] == k] for k in kinds}
    checks = {}

    conn_err = [r for r in res if r.get("connection_error")]
    valid_not_200 = [r for r in by_kind["valid"] if r.get("status") != 200]
    checks["a_answered"] = {
        "pass": not conn_err and not valid_not_200 and health == 200,
        "text": (f"{a.requests - len(conn_err)}/{a.requests} requests answered or deliberately "
                 f"cut ({len(conn_err)} connection errors); "
                 f"{len(by_kind['valid']) - len(valid_not_200)}/{len(by_kind['valid'])} valid got "
                 f"200 ({load.count_429} 429s retried); "
                 f"GET /health after: {health}"),
        "connection_errors": [r["connection_error"] for r in conn_err][:20],
        "valid_failures": [r.get("error") for r in valid_not_200][:20],
    }

    repeated = {k: v for k, v in load.hashes.items() if len(v) > 1}
    crosstalk = sorted(k for k, v in repeated.items() if len({s for _, s in v}) > 1)
    checks["b_no_crosstalk"] = {
        "pass": not crosstalk,
        "text": (f"{len(repeated)} keys seen more than once "
                 f"({sum(len(v) for v in repeated.values())} images) of {len(load.hashes)} keys; "
                 f"{len(crosstalk)} with differing bytes"),
        "differing": [list(k) for k in crosstalk][:20],
    }
    if not repeated:
        checks["b_no_crosstalk"]["text"] += " (nothing to compare: a longer run repeats keys)"

    checks["c_repeat_alone"] = {
        "pass": bool(sample) and not repeat_bad,
        "text": f"{len(sample) - len(repeat_bad)}/{len(sample)} sampled keys equal alone",
        "failures": repeat_bad,
    }

    limit = rss_idle * IDLE_SLACK + IDLE_SLACK_BYTES
    checks["d_memory"] = {
        "pass": rss_after <= limit,
        "text": (f"VmRSS idle after warm-up {mib(rss_idle):.1f} MiB, idle after the load "
                 f"{mib(rss_after):.1f} MiB (limit {mib(limit):.1f} MiB), peak during the load "
                 f"{mib(peak[0]):.1f} MiB"),
        "idle_bytes": rss_idle, "after_bytes": rss_after, "limit_bytes": int(limit),
        "peak_bytes": peak[0],
    }

    bad_mal = [r for r in by_kind["malformed"] if r.get("error") or r.get("connection_error")]
    fivexx = [r for r in res if (r.get("status") or 0) >= 500]
    codes = {k.split('"')[1]: int(v) for k, v in m_final.items()
             if k.startswith("tessera_requests_total{")}
    server_5xx = sum(v for k, v in codes.items() if k.isdigit() and int(k) >= 500)
    per_kind = {}
    for r in by_kind["malformed"]:
        per_kind.setdefault(r.get("what", "?"), {}).setdefault(str(r.get("status")), 0)
        per_kind[r.get("what", "?")][str(r.get("status"))] += 1
    checks["e_malformed_4xx"] = {
        "pass": (not bad_mal and not fivexx and not server_5xx
                 and bool(by_kind["malformed"] or a.requests < 10)),
        "text": (f"{len(by_kind['malformed']) - len(bad_mal)}/{len(by_kind['malformed'])} malformed"
                 f" got their 4xx with a JSON error ("
                 + ", ".join(f"{k}: {v}" for k, v in sorted(per_kind.items()))
                 + f"); 5xx: {len(fivexx)} seen by the clients, {server_5xx} counted by the "
                 f"server's /metrics (disconnected requests included)"),
        "failures": [r.get("error") or r.get("connection_error") for r in bad_mal][:20],
    }

    # Information: what the server counted, and the disconnected requests' images.
    got_images = sum(r.get("images", 0) for r in by_kind["disconnect"])
    received = sum(len(v) for v in load.hashes.values())
    generated_load = int(m_after.get("tessera_images_total", 0)) - 2 * a.batch * len(methods)
    info = {
        "load_seconds": load_s,
        "valid_latency_p50_s": percentile([r["seconds"] for r in by_kind["valid"]], 50)
        if by_kind["valid"] else None,
        "valid_latency_p99_s": percentile([r["seconds"] for r in by_kind["valid"]], 99)
        if by_kind["valid"] else None,
        "images_received": received,
        "disconnected_images": got_images,
        "images_generated_in_load": generated_load,
        "server_requests_by_code": codes,
        "server_disconnects_total": m_final.get("tessera_disconnects_total"),
        "server_exit_status": status_exit,
    }
    # Images generated for the disconnected requests: all of theirs if the server does not notice
    # a client gone, fewer if it frees their slots.
    info["disconnected_images_generated"] = generated_load - received

    print(f"tessera serve load: {a.method}, -b {a.batch}, --queue {a.queue}; {a.requests} "
          f"requests from {a.clients} clients (seed {a.seed}) in {load_s:.1f} s: "
          f"{kinds['valid']} valid, {kinds['malformed']} malformed, {kinds['disconnect']} "
          f"disconnects")
    for name, c in checks.items():
        print(f"  {'PASS' if c['pass'] else 'FAIL'}  ({name[0]}) {name[2:].replace('_', ' ')}: "
              f"{c['text']}")
        for f in (c.get("connection_errors") or []) + (c.get("valid_failures") or []) + \
                (c.get("failures") or []):
            print(f"        {f}")
    lat = (f"valid p50 {info['valid_latency_p50_s']:.2f} s, p99 {info['valid_latency_p99_s']:.2f}"
           f" s; " if by_kind["valid"] else "")
    print(f"  info: {lat}images received {received}; images generated during the load "
          f"{generated_load} (for the {kinds['disconnect']} disconnects, {got_images} asked: "
          f"{info['disconnected_images_generated']} generated; server's disconnects counted "
          f"{info['server_disconnects_total']}); server's requests by status {codes}; server exit "
          f"status {status_exit}")
    ok = all(c["pass"] for c in checks.values())
    failed = [k for k, c in checks.items() if not c["pass"]]
    print("serve-load: " + ("FAILED: " + ", ".join(failed) if failed else "all checks passed"))

    if a.json_out:
        report["checks"] = checks
        report["info"] = info
        report["counts"] = kinds
        report["count_429"] = load.count_429
        report["requests"] = [dict(r, i=i) for i, r in enumerate(res)]
        report["images"] = [{"key": list(k), "sha256": [[i, sha] for i, sha in v]}
                            for k, v in sorted(load.hashes.items())]
        report["repeat_alone_keys"] = [list(k) for k in sample]
        with open(a.json_out, "w") as f:
            json.dump(report, f, indent=1)
        log(f"wrote {a.json_out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
