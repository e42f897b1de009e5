"""Type stubs of the extension module tessera._tessera (tools/python). Users call the classes of
the package (tessera.Pipeline, tessera.Generation); ServeEngine, the errors and the functions are
re-exported there."""
from typing import Any, Callable, Optional, Sequence

import numpy as np

__version__: str

class Error(RuntimeError):
    """An error of the tessera engine; its one-line message names the problem."""

class ParameterError(Error, ValueError):
    """A bad value of a named parameter; .param is its keyword (lantern_k, top_k, ...)."""
    param: str

def methods() -> list[dict[str, Any]]: ...
def default_model() -> str: ...
def set_log_level(level: int) -> None: ...

class _Pipeline:
    def __init__(self, model_dir: str, device: str = "cpu", threads: int = 0,
                 text_encoder: str = "", text_preprocessing: str = "clean",
                 load_decoder: bool = True, check_weights: bool = True) -> None: ...
    def generate(self, prompts: Sequence[object], n: int, seed: int, method: str, style: str,
                 progress: Optional[Callable[[int, int], Any]], decode: bool,
                 **kwargs: Any) -> tuple[list[np.ndarray], Optional[np.ndarray], str,
                                         list[str]]: ...
    def decode(self, tokens: np.ndarray) -> np.ndarray: ...
    architecture: str
    device: str
    image_size: int
    has_decoder: bool
    text_conditional: bool
    grid: int
    class_names: list[str]
    threads: int

class _Generation:
    def add(self, prompt: object, seed: int = 0, image_index: int = 0, style: str = "",
            method: Optional[str] = None, **kwargs: Any) -> int: ...
    def step(self) -> bool: ...
    def poll(self) -> list[tuple[int, np.ndarray, dict[str, Any]]]: ...
    def cancel(self, id: int) -> None: ...
    def tokens(self, id: int) -> np.ndarray: ...
    def preview(self, id: int) -> np.ndarray: ...
    def image_stats(self, id: int) -> dict[str, Any]: ...
    stats: dict[str, Any]
    capacity: int
    in_flight: int

def _start_generation(pipeline: _Pipeline, method: str, batch: int,
                      **kwargs: Any) -> _Generation: ...

class ServeEngine:
    """tessera serve's engine without its HTTP layer: the same request parser, continuous
    batching and JSON answers. Thread-safe; blocking calls release the GIL."""
    def __init__(self, model_dir: str, *, device: str = "cpu", threads: int = 0,
                 method: str = "vanilla", draft: Optional[str] = None, methods: str = "all",
                 batch: int = 4, queue: int = 64, timeout_s: float = 600.0, max_n: int = 16,
                 max_body: int = 65536, max_settings: int = 4, separate_methods: bool = False,
                 warm_up: bool = True) -> None: ...
    def generations(self, body: str | bytes) -> tuple[int, str, dict[str, str]]: ...
    def models(self) -> tuple[int, str]: ...
    def health(self) -> tuple[int, str]: ...
    def metrics(self) -> str: ...
    def stop(self) -> None: ...
