"""Tests of the Python package (issue 46) against the `tessera` command shipped with it: the same
images for the same seeds (class names, typed prompts on a t2i model, MAR latents), the streaming
Generation API, ServeEngine, errors raised with the engine's messages, threads sharing a
Pipeline with the GIL released, the progress callback and Ctrl-C.

Run with the package importable (pip install ., or PYTHONPATH=BUILD/python for a build tree made
with -DTESSERA_PYTHON=ON): python -m pytest python/test_package.py
"""
import _thread
import json
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from PIL import Image

import tessera
from tessera.__main__ import command

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMOJI = os.path.join(ROOT, "models", "emoji", "target")
FIX = os.path.join(ROOT, "tests", "fixtures")
CLI = os.environ.get("TESSERA_CLI") or command()


def cli(*args, cwd=None):
    r = subprocess.run([CLI, *args, "-q"], capture_output=True, text=True, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture(scope="module")
def pipe():
    return tessera.Pipeline(EMOJI)


def cli_images(tmp_path, *args, n):
    out = tmp_path / "img.png"
    cli("generate", "-m", EMOJI, *args, "-n", str(n), "-o", str(out))
    names = [out] if n == 1 else [tmp_path / f"img_{i:04d}.png" for i in range(n)]
    return [np.asarray(Image.open(p).convert("RGB")) for p in names]


def test_the_readme_example(tmp_path):
    """The README's Python example, as written, from a directory with the repository's models."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = readme.split("## Python", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    assert "pipe.generate(" in code
    os.symlink(os.path.join(ROOT, "models"), tmp_path / "models")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(code, "README.md (Python)", "exec"), {})
    finally:
        os.chdir(cwd)
    assert Image.open(tmp_path / "apple.png").size == (64, 64)


@pytest.mark.parametrize("method,extra", [("vanilla", []), ("sd", ["--draft-len", "4"]),
                                          ("lantern", [])])
def test_same_images_as_the_cli(pipe, tmp_path, method, extra):
    want = cli_images(tmp_path, "red apple", "--method", method, "--seed", "7", *extra, n=3)
    kw = {"draft_len": 4} if extra else {}
    images, stats = pipe.generate("red apple", n=3, seed=7, method=method, output="numpy", **kw)
    assert len(images) == 3
    for got, ref in zip(images, want):
        assert got.dtype == np.uint8 and got.shape == (64, 64, 3)
        np.testing.assert_array_equal(got, ref)
    assert stats["images"] == 3 and stats["method"] == method
    assert stats["labels"] == ["red apple (twitter)"] * 3
    assert len(stats["per_image"]) == 3


def test_draft_costs_given_back_repeat_the_lengths_and_the_cli(pipe, tmp_path):
    """draft_len "auto" reports the costs it chose from; passed back as draft_costs they fix the
    lengths (flat costs: every head each round), and the CLI given the same costs draws the same
    image."""
    _, stats = pipe.generate("red apple", seed=3, method="medusa", output="tokens")
    costs = stats["draft_costs"]
    assert costs["draft_step"] == 0 and len(costs["verify"]) >= 5
    assert all(v > 0 for v in costs["verify"])
    flat = {"draft_step": 0.0, "verify": [0.001] * 5}
    images, stats = pipe.generate("red apple", seed=3, method="medusa", output="numpy",
                                  draft_costs=flat)
    assert stats["draft_costs"] == flat and stats["mean_draft_depth"] > 3.9
    # The rounds a choice was held for: 1 (Medusa's trees choose every round), or as given back.
    assert stats["draft_hold"] == 1
    _, held = pipe.generate("red apple", seed=3, method="medusa", output="tokens",
                            draft_costs=flat, draft_hold=4)
    assert held["draft_hold"] == 4
    with pytest.raises(tessera.ParameterError, match="^draft_hold is what"):
        pipe.generate("red apple", method="medusa", draft_len=4, draft_hold=2)
    want = cli_images(tmp_path, "red apple", "--method", "medusa", "--seed", "3",
                      "--draft-costs", "0:" + ",".join(["0.001"] * 5), n=1)
    np.testing.assert_array_equal(images[0], want[0])
    with pytest.raises(tessera.ParameterError, match="^draft_costs has 2 verification costs"):
        pipe.generate("red apple", method="medusa", draft_costs={"verify": [0.1, 0.1]})
    with pytest.raises(tessera.ParameterError, match="^draft_costs must be a dict"):
        pipe.generate("red apple", method="medusa", draft_costs="0:0.1")


def test_pil_images_class_ids_lists_and_tokens(pipe):
    images, _ = pipe.generate(["red apple", 3], seed=1)
    assert [im.size for im in images] == [(64, 64)] * 2 and images[0].mode == "RGB"
    grids, stats = pipe.generate(["red apple", 3], seed=1, output="tokens")
    assert [g.shape for g in grids] == [(16, 16)] * 2 and grids[0].dtype == np.int32
    decoded = pipe.decode(np.stack(grids), output="numpy")
    np.testing.assert_array_equal(decoded[0], np.asarray(images[0]))
    np.testing.assert_array_equal(np.asarray(pipe.decode(grids[1])), np.asarray(images[1]))
    # Image i of a call uses stream (seed, image_index + i): the second image alone.
    alone, _ = pipe.generate(3, seed=1, image_index=1, output="tokens")
    np.testing.assert_array_equal(alone[0], grids[1])
    assert stats["labels"][1] == pipe.class_names[3]


def test_typed_prompt_on_a_t2i_model(tmp_path):
    model, t5 = os.path.join(FIX, "llamagen", "t2i_f32"), os.path.join(FIX, "t5", "f32")
    out = tmp_path / "tokens.npy"
    cli("generate", "-m", model, "--text-encoder", t5, "a photo of a corgi", "--seed", "3",
        "--tokens-out", str(out))
    p = tessera.Pipeline(model, text_encoder=t5)
    assert p.text_conditional
    grids, stats = p.generate("a photo of a corgi", seed=3, output="tokens")
    np.testing.assert_array_equal(grids[0], np.load(out)[0])
    assert stats["labels"] == ["a photo of a corgi"]
    # Caption features (T5's output for a prompt) as an array, as --caption FILE.npy takes them.
    feats = tmp_path / "caption.npy"
    cli("encode", "-m", t5, "--prompt", "a red apple", "--out", str(feats))
    cli("generate", "-m", model, "--caption", str(feats), "--seed", "4", "--tokens-out", str(out))
    grids, stats = p.generate(np.load(feats), seed=4, output="tokens")
    np.testing.assert_array_equal(grids[0], np.load(out)[0])
    with pytest.raises(tessera.Error, match="are for text-conditional"):
        tessera.Pipeline(EMOJI).generate(np.load(feats))


def test_mar_latents_match_the_cli(tmp_path):
    model = os.path.join(FIX, "mar", "target_f32")
    draft = os.path.join(FIX, "mar", "draft_f32")
    p = tessera.Pipeline(model)
    assert p.architecture == "mar"
    out = tmp_path / "latents.npy"
    for flags, kw in [([], {}), (["--steps", "4"], {"steps": 4}),
                      (["--method", "cspd", "--draft", draft, "--steps", "8", "--draft-len", "2"],
                       {"method": "cspd", "draft": draft, "steps": 8, "draft_len": 2})]:
        cli("generate", "-m", model, "--class", "2", "--seed", "5", *flags,
            "--latents-out", str(out))
        latents, stats = p.generate(2, seed=5, output="tokens", **kw)
        np.testing.assert_array_equal(latents[0], np.load(out).reshape(-1))
        assert stats["steps"] == kw.get("steps", 16)  # the default: 64, capped at the tokens
    assert stats["method"] == "cspd" and stats["drafted"] > 0
    with pytest.raises(tessera.Error, match="cspd needs a draft model: give draft DIR"):
        p.generate(2, method="cspd")
    with pytest.raises(tessera.ParameterError, match="^draft_hold is for LlamaGen methods"):
        p.generate(2, method="cspd", draft=draft, draft_hold=4)


def test_errors_name_the_keyword(pipe):
    with pytest.raises(tessera.ParameterError, match="^lantern_k must be >= 1") as e:
        pipe.generate("red apple", method="lantern", lantern_k=0)
    assert e.value.param == "lantern_k" and isinstance(e.value, ValueError)
    with pytest.raises(tessera.ParameterError, match="top_k must be an int, not str"):
        pipe.generate("red apple", top_k="x")
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        pipe.generate("red apple", bogus=1)
    with pytest.raises(tessera.Error, match="no emoji named 'zzqqx'"):
        pipe.generate("zzqqx")
    with pytest.raises(tessera.ParameterError, match="out of range"):
        pipe.generate(100000)
    with pytest.raises(tessera.ParameterError, match="unknown method"):
        pipe.generate("red apple", method="nope")
    with pytest.raises(tessera.ParameterError, match="n must be >= 1"):
        pipe.generate("red apple", n=0)
    with pytest.raises(tessera.ParameterError, match="output must be"):
        pipe.generate("red apple", output="jpeg")
    with pytest.raises(TypeError, match="a prompt is None, an int"):
        pipe.generate(1.5)
    with pytest.raises(tessera.Error, match="not a model directory|config.json"):
        tessera.Pipeline(str(FIX))
    with pytest.raises(tessera.ParameterError, match="device"):
        tessera.Pipeline(EMOJI, device="tpu")


def test_methods_registry():
    by_name = {m["name"]: m for m in tessera.methods()}
    assert {"vanilla", "sd", "lantern", "sjd", "cool-sd"} <= set(by_name)
    assert by_name["sd"]["lossless"] and not by_name["lantern"]["lossless"]
    assert "lantern_k" in [p["name"] for p in by_name["lantern"]["params"]]


def test_threads_share_a_pipeline_with_the_gil_released(pipe):
    want, _ = pipe.generate(["red apple", "banana"], seed=11, output="tokens")
    results, ticks = {}, [0]

    def run(i, prompt):
        results[i] = pipe.generate(prompt, seed=11, image_index=i, output="tokens")[0][0]

    threads = [threading.Thread(target=run, args=(i, p)) for i, p in
               enumerate(["red apple", "banana"])]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):  # Python runs while the engine generates
        ticks[0] += 1
        time.sleep(0.001)
    for t in threads:
        t.join()
    for i in range(2):
        np.testing.assert_array_equal(results[i], want[i])
    assert ticks[0] > 10


def test_progress_and_its_exceptions(pipe):
    seen = []
    pipe.generate("red apple", n=2, progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (512, 512) and all(a[0] <= b[0] for a, b in zip(seen, seen[1:]))

    def stop(done, total):
        if done > 20:
            raise RuntimeError("enough")

    with pytest.raises(RuntimeError, match="enough"):
        pipe.generate("red apple", n=2, progress=stop)


def test_ctrl_c_stops_a_call_cleanly(pipe):
    # Python's own SIGINT handler for the test, also where it runs in the background of a shell
    # without job control: there SIGINT is ignored, and interrupt_main would do nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        threading.Timer(0.3, _thread.interrupt_main).start()
        t0 = time.time()
        with pytest.raises(KeyboardInterrupt):
            pipe.generate("red apple", n=256, batch=1)
        assert time.time() - t0 < 5
    finally:
        signal.signal(signal.SIGINT, previous)
    images, _ = pipe.generate("red apple")  # still usable
    assert len(images) == 1


def test_generation_streams_requests(pipe):
    prompts = ["red apple", "banana", 7]
    want, _ = pipe.generate(prompts, seed=5, method="sd", draft_len=3, output="tokens")
    gen = pipe.start_generation(method="sd", batch=2, draft_len=3)
    assert gen.capacity == 2
    live = {gen.add(prompts[i], seed=5, image_index=i): i for i in range(2)}
    with pytest.raises(tessera.ParameterError, match="capacity"):
        gen.add(prompts[2])
    assert gen.step()  # the prefills
    first = next(iter(live))
    assert gen.preview(first).size == (64, 64)
    assert gen.image_stats(first)["tokens"] == len(gen.tokens(first)) > 0
    finished, steps = {}, 0
    while live and steps < 2000:
        gen.step()
        steps += 1
        for f in gen.poll():
            finished[live.pop(f.id)] = f
            if len(finished) == 1:  # the freed slot takes the next request, with the freed id
                i = gen.add(prompts[2], seed=5, image_index=2)
                assert i == f.id
                live[i] = 2
    assert sorted(finished) == [0, 1, 2]
    for i in range(3):  # as if generated alone: batch invariance through the API
        np.testing.assert_array_equal(finished[i].tokens, want[i])
    assert finished[0].image().size == (64, 64)
    assert finished[0].stats["tokens"] == 256 and gen.stats["images"] == 3
    # A cancelled request is never polled and its id is free.
    gen2 = pipe.start_generation(batch=2)
    x = gen2.add("red apple")
    gen2.cancel(x)
    assert list(gen2.run()) == []
    with pytest.raises(tessera.ParameterError, match="id"):
        gen2.cancel(x)


def test_generation_mixes_methods_that_draft_alike(pipe):
    """Requests of sd, lantern and cool-sd on one draft model share a generation's forwards,
    each image its method's alone; a method that drafts otherwise is refused naming method."""
    asks = [("sd", {}), ("lantern", {"lantern_k": 5}), ("cool-sd", {"cool_delta": 1.5})]
    gen = pipe.start_generation(method="sd", batch=3, draft_len=4)
    ids = {gen.add("banana", seed=8, method=m, draft_len=4, **kw): (m, kw) for m, kw in asks}
    finished = list(gen.run())
    got = {ids[f.id][0]: f.tokens for f in finished}
    rounds = max(f.stats["rounds"] for f in finished)
    assert gen.stats["batched_target_forwards"] == 1 + rounds  # one prefill, shared rounds
    for m, kw in asks:
        want, _ = pipe.generate("banana", seed=8, method=m, draft_len=4, output="tokens", **kw)
        np.testing.assert_array_equal(got[m], want[0], err_msg=m)
    with pytest.raises(tessera.ParameterError, match="own") as e:
        gen.add("banana", method="lantern", draft_len=2)
    assert e.value.param == "method"
    with pytest.raises(TypeError, match="batch"):
        gen.add("banana", method="lantern", batch=2)


def test_serve_engine_answers_as_tessera_serve(tmp_path):
    engine = tessera.ServeEngine(EMOJI, methods="vanilla,sd", batch=2)
    status, body = engine.health()
    assert status == 200 and json.loads(body)["status"] == "ok"
    models = json.loads(engine.models()[1])
    assert models["data"][0]["tessera"]["methods"] == ["sd", "vanilla"]
    want = cli_images(tmp_path, "red apple", "--seed", "9", n=2)
    replies = {}

    def ask(i):
        replies[i] = engine.generations(json.dumps({"prompt": "red apple", "n": 2, "seed": 9}))

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    import base64
    import io
    for status, body, headers in replies.values():
        assert status == 200, body
        data = json.loads(body)["data"]
        for d, ref in zip(data, want):
            img = np.asarray(Image.open(io.BytesIO(base64.b64decode(d["b64_json"]))).convert("RGB"))
            np.testing.assert_array_equal(img, ref)
    status, body, _ = engine.generations(b"{")
    assert status == 400 and json.loads(body)["error"]["message"] == "the body is not valid JSON"
    status, body, _ = engine.generations(json.dumps({"prompt": "red apple", "method": "lantern"}))
    assert status == 400 and json.loads(body)["error"]["param"] == "method"
    assert 'tessera_requests_total{code="200"}' in engine.metrics()
    engine.stop()
    assert engine.health()[0] == 503
    status, _, _ = engine.generations(json.dumps({"prompt": "red apple"}))
    assert status == 503
    with pytest.raises(tessera.Error, match="methods: nope"):
        tessera.ServeEngine(EMOJI, methods="nope")


def test_serve_engine_methods_share_batches_unless_separate():
    """lantern drafts as sd does on one draft: it joins sd's batch, unless separate_methods."""
    for separate, joined in ((False, 1), (True, 0)):
        engine = tessera.ServeEngine(EMOJI, method="sd", methods="sd,lantern", batch=2,
                                     separate_methods=separate)
        status, body, _ = engine.generations(json.dumps({"prompt": "banana", "method": "lantern"}))
        assert status == 200, body
        assert f"tessera_joined_settings {joined}\n" in engine.metrics()
        assert f"tessera_settings {2 - joined}\n" in engine.metrics()
        engine.stop()


def test_the_streaming_example(tmp_path):
    out = tmp_path / "f.gif"
    r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "streaming.py"), str(out),
                        "--prompts", "red apple", "banana"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    gif = Image.open(out)
    assert gif.n_frames > 10 and gif.size == (2 * 64 * 2, 64 * 2)


def test_python_m_tessera_is_the_cli(tmp_path):
    r = subprocess.run([sys.executable, "-m", "tessera", "--version"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and r.stdout.startswith("tessera")
    out = tmp_path / "x.png"
    r = subprocess.run([sys.executable, "-m", "tessera", "generate", "-m", EMOJI, "red apple",
                        "--seed", "2", "-o", str(out), "-q"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    images, _ = tessera.Pipeline(EMOJI).generate("red apple", seed=2, output="numpy")
    np.testing.assert_array_equal(np.asarray(Image.open(out).convert("RGB")), images[0])
    r = subprocess.run([sys.executable, "-m", "tessera", "generate", "--method", "nope"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "nope" in r.stderr
