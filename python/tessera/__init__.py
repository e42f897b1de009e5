"""tessera: autoregressive image generation with speculative decoding, from Python.

    import tessera
    pipe = tessera.Pipeline("models/emoji/target", device="cpu")
    images, stats = pipe.generate("red apple", n=4, method="lantern", seed=0)

The engine is C++ (the extension module tessera._tessera, on tessera's public C++ API); it runs
with the GIL released, so Python threads can generate at once, and Ctrl-C stops a call cleanly
(KeyboardInterrupt). Engine errors are raised as tessera.Error (RuntimeError) or, for a bad value of
a named argument, tessera.ParameterError (ValueError; .param names the keyword argument).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from . import _tessera
from ._tessera import Error, ParameterError, ServeEngine, methods, set_log_level

__all__ = ["Pipeline", "Generation", "FinishedImage", "ServeEngine", "Error", "ParameterError",
           "methods", "default_model", "set_log_level", "__version__"]
__version__ = _tessera.__version__

Prompt = Union[None, int, str, np.ndarray]


def default_model() -> str:
    """The embedded emoji model's directory: the one installed with the package, else
    $TESSERA_DEFAULT_MODEL or the source tree's models/emoji/target."""
    here = os.path.join(os.path.dirname(__file__), "models", "emoji", "target")
    if not os.environ.get("TESSERA_DEFAULT_MODEL") and os.path.isfile(
            os.path.join(here, "config.json")):
        return here
    return _tessera.default_model()


def _images(pixels: Optional[np.ndarray], output: str) -> list:
    if pixels is None:
        return []
    if output == "numpy":
        return list(pixels)
    from PIL import Image
    return [Image.fromarray(p, "RGB") for p in pixels]


def _check_output(output: str) -> None:
    if output not in ("pil", "numpy", "tokens"):
        raise ParameterError(f"output must be pil, numpy or tokens, not {output!r}")


class Pipeline:
    """A loaded model: LlamaGen (class- or text-conditional) or MAR.

    model: a model directory (config.json and weights; tools/convert_*.py make them), default the
    embedded emoji model. device: "cpu", "cuda" or "cuda:N". threads: CPU threads (0: all).
    text_encoder: a t2i model's T5 directory (default: the one its config.json names);
    text_preprocessing: clean (LlamaGen's default), lower or none. load_decoder: False skips the
    image decoder (tokens only). Threads may share a Pipeline.
    """

    def __init__(self, model: Optional[str] = None, *, device: str = "cpu", threads: int = 0,
                 text_encoder: Optional[str] = None, text_preprocessing: str = "clean",
                 load_decoder: bool = True, check_weights: bool = True):
        self.model_dir = os.fspath(model) if model is not None else default_model()
        self._p = _tessera._Pipeline(self.model_dir, device, threads, text_encoder or "",
                                     text_preprocessing, load_decoder, check_weights)

    architecture = property(lambda self: self._p.architecture, doc='"llamagen" or "mar"')
    device = property(lambda self: self._p.device, doc="the backend the model runs on")
    image_size = property(lambda self: self._p.image_size, doc="pixels per side")
    grid = property(lambda self: self._p.grid, doc="tokens per side (LlamaGen)")
    text_conditional = property(lambda self: self._p.text_conditional,
                                doc="a t2i model: prompts are typed text for its T5 encoder")
    class_names = property(lambda self: self._p.class_names,
                           doc="the class labels of a model with classes.json, by id")

    @property
    def threads(self) -> int:
        return self._p.threads

    @threads.setter
    def threads(self, n: int) -> None:
        self._p.threads = n

    def generate(self, prompt: Union[Prompt, Sequence[Prompt]] = None, *, n: int = 1,
                 seed: int = 0, method: str = "vanilla", style: Optional[str] = None,
                 output: str = "pil", progress: Optional[Callable[[int, int], Any]] = None,
                 **kwargs: Any) -> tuple[list, dict]:
        """Generates n images per prompt; returns (images, stats).

        prompt: a class name ("red apple", matched as `tessera generate` matches it) or class id
        of a class-conditional model, typed text for a text-conditional one, T5 caption features
        [rows, caption_dim], None for unconditional images, or a list of these. Image i of the
        call (prompt p, copy j: i = p * n + j) uses random stream (seed, image_index + i), so it
        equals `tessera generate` for that prompt with -n and --seed.

        method: vanilla, sd, lantern, ... (tessera.methods()); its parameters as keywords
        (lantern_k=10, lantern_delta=0.2). Other keywords: draft (a draft model directory, or
        "none" for Jacobi drafts; default the model's own), draft_len (int or "auto"),
        draft_costs (what "auto" chooses from, as stats["draft_costs"] gives them: passed back,
        they repeat a run's lengths, hence its images, on any machine), draft_hold (the rounds
        "auto" holds a length for, as stats["draft_hold"] gives it: passed back with the costs,
        the lengths repeat on either loop), max_auto_len, tree, resample, max_rounds, cfg, cfg_interval, temperature, top_k, top_p,
        batch (images at once; default all, at most 16), image_index, max_tokens, device_loop;
        MAR: steps, cfg_schedule. A keyword left out, or None, keeps the model's default.

        output: "pil" (PIL images), "numpy" (uint8 arrays [H, W, 3]) or "tokens" (the token
        grids, int32 [grid, grid]; MAR: latents). progress(done, total) is called after every
        token with the tokens done over the whole call.

        stats: images, tokens, seconds, mean_accepted_length, acceptance_by_depth, notes, ... and
        per_image (as `tessera generate --stats-out` writes them), and the images' labels.
        """
        _check_output(output)
        prompts = list(prompt) if isinstance(prompt, (list, tuple)) else [prompt]
        grids, pixels, stats, labels = self._p.generate(prompts, n, seed, method, style or "",
                                                        progress, output != "tokens", **kwargs)
        stats = json.loads(stats)
        stats["labels"] = labels
        return (grids if output == "tokens" else _images(pixels, output)), stats

    def decode(self, tokens: np.ndarray, output: str = "pil"):
        """Token grids (int32 [grid, grid] or [n, grid, grid]) to an image or a list of them."""
        _check_output(output)
        pixels = self._p.decode(np.ascontiguousarray(tokens, dtype=np.int32))
        if pixels.ndim == 3:
            return _images(pixels[None], output)[0]
        return _images(pixels, output)

    def start_generation(self, *, method: str = "vanilla", batch: int = 4,
                         **kwargs: Any) -> "Generation":
        """A generation stepped by its caller (LlamaGen): requests added and cancelled between
        steps, up to `batch` at once, with this method, its parameters (keywords as in
        generate) and drafter; each request may bring its own sampling values, and its own
        method where that drafts alike (sd, lantern, cool-sd, ... on one draft model)."""
        return Generation(self, _tessera._start_generation(self._p, method, batch, **kwargs))

    def __repr__(self) -> str:
        return f"tessera.Pipeline({self.model_dir!r}, device={self.device!r})"


class FinishedImage:
    """A finished request of a Generation: its id, token grid, statistics, and image()."""

    def __init__(self, pipe: Pipeline, id: int, tokens: np.ndarray, stats: dict):
        self._pipe, self.id, self.tokens, self.stats = pipe, id, tokens, stats

    def image(self, output: str = "pil"):
        return self._pipe.decode(self.tokens, output)

    def __repr__(self) -> str:
        return f"FinishedImage(id={self.id}, tokens={self.stats.get('tokens')})"


class Generation:
    """Requests stepped together (include/tessera/generation.h): each step is one batched target
    forward over every request in flight (a prefill, a token, or a speculative round). A
    request's image depends only on its prompt, seed and image_index (and its method, which
    may be its own where it drafts as the generation's does), never on what it was batched with.

        gen = pipe.start_generation(method="sd", batch=4)
        a = gen.add("red apple", seed=1)
        while gen.step():
            show(gen.preview(a))        # the image so far
            for done in gen.poll(): ...  # FinishedImage
    """

    def __init__(self, pipe: Pipeline, gen: Any):
        self._pipe, self._g = pipe, gen

    def add(self, prompt: Prompt = None, *, seed: int = 0, image_index: int = 0,
            style: Optional[str] = None, method: Optional[str] = None, **kwargs: Any) -> int:
        """Queues a request and returns its id (a finished or cancelled request's id is reused).
        kwargs: its own cfg, cfg_interval, temperature, top_k, top_p. method: its own method,
        with its parameters and drafting keywords as in generate (lantern_k=5, draft_len=4); it
        shares the generation's forwards, so it must draft as the generation's method does (the
        same drafter, draft_len, tree): ParameterError("method") otherwise."""
        return self._g.add(prompt, seed, image_index, style or "", method, **kwargs)

    def step(self) -> bool:
        """One batched forward; False when no request is in flight."""
        return self._g.step()

    def poll(self) -> list[FinishedImage]:
        """The requests finished since the last poll, in the order they finished."""
        return [FinishedImage(self._pipe, i, t, s) for i, t, s in self._g.poll()]

    def cancel(self, id: int) -> None:
        self._g.cancel(id)

    def tokens(self, id: int) -> np.ndarray:
        """The tokens committed so far of a request (raster order)."""
        return self._g.tokens(id)

    def preview(self, id: int, output: str = "pil"):
        """The image so far: its tokens decoded, the cells not generated yet grey."""
        _check_output(output)
        return _images(self._g.preview(id)[None], output)[0]

    def image_stats(self, id: int) -> dict:
        """A request's statistics so far (accepted_depth: an acceptance map of its tokens)."""
        return self._g.image_stats(id)

    def run(self) -> Iterable[FinishedImage]:
        """Steps until no request is in flight, yielding images as they finish."""
        while self.step():
            yield from self.poll()
        yield from self.poll()

    stats = property(lambda self: self._g.stats, doc="timing and forward counts so far")
    capacity = property(lambda self: self._g.capacity, doc="requests that can be added now")
    in_flight = property(lambda self: self._g.in_flight, doc="requests added, not finished")
