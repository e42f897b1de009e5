"""tessera.serve_ray (issue 46): tessera serve's engine on Ray Serve, on a local Ray cluster.

Two replicas of the emoji model behind Ray's HTTP proxy: /health and /v1/models answer; requests
sent at once are spread over both replicas (X-Tessera-Replica) and each gets exactly the images of
`tessera generate` for its prompt and seed (none swapped between requests); the engine's 4xx JSON
errors come through Ray; and a load of 200 requests, 16 at a time, is answered in full on 2
replicas and on 1 (images/s printed: run with -s).

Run with the package importable (pip install ., or PYTHONPATH=BUILD/python) and ray[serve]:
python -m pytest -s python/test_serve_ray.py. The CLI compared against: $TESSERA_CLI, else the
`tessera` command installed with the package.
"""
import base64
import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import requests
import yaml
from PIL import Image

# Imported outright, not importorskip: scripts/setup-deps.sh installs Ray in the test venv, and a
# skipped test would pass CI unseen.
import ray
from ray import serve
from tessera.serve_ray import REPLICA_HEADER, app_builder, build_app

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMOJI = os.path.join(ROOT, "models", "emoji", "target")
APP = "tessera-test"
LOAD_REQUESTS, LOAD_CLIENTS = 200, 16


def cli_path():
    if os.environ.get("TESSERA_CLI"):
        return os.environ["TESSERA_CLI"]
    from tessera.__main__ import command
    return command()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url():
    # Ray's own usage report would try the network; the cluster is this process's alone
    # (address="local": never one that RAY_ADDRESS or `ray start` names), on ports Ray picks,
    # and Serve's proxy on a free port.
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=4, object_store_memory=100 * 1024 * 1024,
             include_dashboard=False, log_to_driver=False)
    port = free_port()
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


def deploy(replicas):
    # One CPU and one engine thread per replica: replicas, not threads, are what is scaled here.
    t0 = time.monotonic()
    serve.run(build_app(EMOJI, replicas=replicas, cpus=1, device="cpu", batch=4), name=APP,
              route_prefix="/")
    # Redeploying with fewer replicas returns once the new target is running; wait until the
    # others have stopped too, so that no request reaches them.
    while True:
        dep = serve.status().applications[APP].deployments["TesseraEngine"]
        if dep.replica_states.get("RUNNING", 0) == replicas and sum(
                dep.replica_states.values()) == replicas:
            return time.monotonic() - t0
        time.sleep(0.2)


@pytest.fixture(scope="module")
def two(url):
    print(f"\n2 replicas deployed in {deploy(2):.1f} s")
    return url


def generate(url, session=requests, **body):
    r = session.post(f"{url}/v1/images/generations", data=json.dumps(body), timeout=300)
    return r


def pixels(b64):
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(b64))).convert("RGB"))


def cli_images(tmp_path, name, prompt, n, seed, *args):
    out = tmp_path / f"{name}.png"
    r = subprocess.run([cli_path(), "generate", "-m", EMOJI, prompt, "-n", str(n), "--seed",
                        str(seed), *args, "-o", str(out), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    files = [out] if n == 1 else [tmp_path / f"{name}_{i:04d}.png" for i in range(n)]
    return [np.asarray(Image.open(f).convert("RGB")) for f in files]


def test_kuberay_manifest_builds_the_app():
    # deploy/kuberay/rayservice.yaml's Serve config is one Ray Serve accepts, and its args build
    # the application (no cluster needed: nothing is deployed).
    from ray.serve.schema import ServeDeploySchema
    with open(os.path.join(ROOT, "deploy", "kuberay", "rayservice.yaml")) as f:
        service = yaml.safe_load(f)
    assert service["apiVersion"] == "ray.io/v1" and service["kind"] == "RayService"
    config = ServeDeploySchema.model_validate(yaml.safe_load(service["spec"]["serveConfigV2"]))
    app = config.applications[0]
    assert app.import_path == "tessera.serve_ray:app_builder" and app.route_prefix == "/"
    deployment = app_builder(app.args)._bound_deployment
    model_dir, engine, max_ongoing = deployment.init_args
    assert model_dir == "/models/emoji/target" and engine["device"] == "cpu"
    assert engine["threads"] == 2 and max_ongoing == engine["batch"] + engine["queue"]
    assert deployment.ray_actor_options == {"num_cpus": 2}
    scaling = deployment._deployment_config.autoscaling_config
    assert (scaling.min_replicas, scaling.max_replicas) == (1, 4)
    assert scaling.target_ongoing_requests == engine["batch"]
    gpu = build_app(EMOJI, replicas=3, device="cuda")._bound_deployment
    assert gpu.ray_actor_options["num_gpus"] == 1 and gpu.num_replicas == 3
    with pytest.raises(TypeError, match="bacth"):
        build_app(EMOJI, bacth=4)


@pytest.mark.parametrize("args,message", [
    ([], "required: -m/--model"),
    (["-m", "/nowhere"], "/nowhere: not a model directory"),
    (["-m", EMOJI, "--autoscale", "3"], "MIN:MAX"),
    (["-m", EMOJI, "--replicas", "0"], "--replicas must be >= 1"),
    (["-m", EMOJI, "--port", "70000"], "not a port"),
])
def test_cli_bad_arguments(args, message):
    # One line and exit status 2, before any Ray cluster starts.
    r = subprocess.run([sys.executable, "-m", "tessera.serve_ray", *args], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr, r.stderr


def test_health_and_models(two):
    r = requests.get(f"{two}/health", timeout=30)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    assert r.headers[REPLICA_HEADER]
    r = requests.get(f"{two}/v1/models", timeout=30)
    assert r.status_code == 200
    model = r.json()["data"][0]
    assert model["id"] == "target"
    assert model["tessera"]["method"] == "vanilla" and "sd" in model["tessera"]["methods"]
    assert model["tessera"]["size"] == 64 and "red apple (twitter)" in model["tessera"]["classes"]
    r = requests.get(f"{two}/metrics", timeout=30)
    assert r.status_code == 200 and "tessera_requests_total" in r.text


# Distinct prompts and seeds, so that an image given to the wrong request is seen.
REQUESTS = [("red apple", 1, 7), ("cat face", 2, 11), ("pizza", 1, 3), ("dog", 2, 5),
            ("banana", 1, 19), ("rose", 1, 23), ("penguin", 2, 29), ("taco", 1, 31)]


def test_same_images_as_the_cli_spread_over_replicas(two, tmp_path):
    bodies = [dict(prompt=p, n=n, seed=s) for p, n, s in REQUESTS]
    # Another setting besides the default one: sd with a fixed draft length (auto's choice
    # depends on measured costs, so the CLI could draft differently).
    bodies.append(dict(prompt="lemon", n=2, seed=37, method="sd", draft_len=4))
    # Sent twice over, all at once: 18 requests, so that both replicas get some.
    with ThreadPoolExecutor(len(bodies) * 2) as pool:
        answers = list(pool.map(lambda b: generate(two, **b), bodies * 2))
    replicas = Counter(r.headers[REPLICA_HEADER] for r in answers)
    assert len(replicas) == 2, replicas
    for i, (body, r) in enumerate(zip(bodies * 2, answers)):
        assert r.status_code == 200, r.text
        got = r.json()
        assert len(got["data"]) == body["n"]
        assert [im["seed"] for im in got["tessera"]["images"]] == [body["seed"]] * body["n"]
        assert all(d["revised_prompt"].startswith(body["prompt"]) for d in got["data"])
        extra = ["--method", "sd", "--draft-len", "4"] if body.get("method") == "sd" else []
        want = cli_images(tmp_path, f"r{i}", body["prompt"], body["n"], body["seed"], *extra)
        for j, (d, ref) in enumerate(zip(got["data"], want)):
            np.testing.assert_array_equal(pixels(d["b64_json"]), ref,
                                          err_msg=f"request {body}, image {j}")
    print(f"\nrequests per replica: {dict(replicas)}")


def test_errors_come_through_ray(two):
    def error(r, status, param=None):
        assert r.status_code == status, r.text[:300]
        e = r.json()["error"]
        assert e["type"] == "invalid_request_error" and e["param"] == param and e["message"]
        assert r.headers[REPLICA_HEADER]
        return e["message"]

    assert "vanilla" in error(generate(two, prompt="red apple", method="nope"), 400, "method")
    r = requests.post(f"{two}/v1/images/generations", data="{bad", timeout=30)
    assert "JSON" in error(r, 400)
    error(generate(two, prompt="red apple", n=17), 400, "n")
    error(generate(two, prompt="red apple", stream=True), 400, "stream")
    error(requests.get(f"{two}/v1/images/generations", timeout=30), 404)
    error(requests.get(f"{two}/nowhere", timeout=30), 404)
    r = requests.post(f"{two}/v1/images/generations", timeout=30,
                      data=json.dumps({"prompt": "red apple", "pad": "x" * 70000}))
    error(r, 413)


PROMPTS = ["red apple", "cat face", "pizza", "dog", "banana", "rose", "penguin", "taco"]


def load(url):
    """LOAD_REQUESTS one-image requests, LOAD_CLIENTS at a time: (seconds, answers)."""
    local = threading.local()

    def one(i):
        if not hasattr(local, "s"):
            local.s = requests.Session()
        r = generate(url, local.s, prompt=PROMPTS[i % len(PROMPTS)], seed=i)
        return r.status_code, r.headers.get(REPLICA_HEADER), r.text

    t0 = time.monotonic()
    with ThreadPoolExecutor(LOAD_CLIENTS) as pool:
        answers = list(pool.map(one, range(LOAD_REQUESTS)))
    seconds = time.monotonic() - t0
    assert len(answers) == LOAD_REQUESTS
    images = []
    for i, (status, _, text) in enumerate(answers):
        assert status == 200, f"request {i}: {status} {text[:300]}"
        body = json.loads(text)
        assert [im["seed"] for im in body["tessera"]["images"]] == [i]
        assert len(body["data"]) == 1
        images.append(body["data"][0]["b64_json"])
    return seconds, Counter(a[1] for a in answers), images


def test_load_two_replicas_then_one(two):
    s2, by_replica, images2 = load(two)
    assert len(by_replica) == 2, by_replica
    print(f"\n2 replicas: {LOAD_REQUESTS} images in {s2:.1f} s, {LOAD_REQUESTS / s2:.2f} images/s "
          f"({LOAD_CLIENTS} clients; per replica {dict(by_replica)})")
    print(f"1 replica deployed in {deploy(1):.1f} s")
    s1, by_replica, images1 = load(two)
    assert len(by_replica) == 1, by_replica
    print(f"1 replica:  {LOAD_REQUESTS} images in {s1:.1f} s, {LOAD_REQUESTS / s1:.2f} images/s; "
          f"2 replicas / 1: {s1 / s2:.2f}x")
    # The same requests give the same images whatever they were batched with, on either replica.
    # PNGs compared decoded: equal pixels are what the engine promises, not equal bytes.
    for i, (a, b) in enumerate(zip(images2, images1)):
        if a != b:
            np.testing.assert_array_equal(pixels(a), pixels(b), err_msg=f"request {i}")
