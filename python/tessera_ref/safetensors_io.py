"""Minimal hand-written safetensors reader/writer (torch 1.13 has no safetensors package).

Format: u64 little-endian header length N, N bytes of JSON header, then the raw little-endian
tensor bytes. The header maps name -> {"dtype", "shape", "data_offsets": [begin, end]} with
offsets relative to the start of the data section. We pad the header with spaces so that
8 + N is a multiple of 8, write tensors back to back (no holes), and write no __metadata__.
Files are written atomically (atomic_io): a failed write leaves no torn file.
"""
import json
import struct

import numpy as np
import torch

from .atomic_io import atomic_write

# tessera dtype name -> (safetensors dtype string, torch dtype)
DTYPES = {
    "f32": ("F32", torch.float32),
    "f16": ("F16", torch.float16),
    "bf16": ("BF16", torch.bfloat16),
}

_ST_TO_NP = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
    "U8": np.uint8, "BOOL": np.bool_,
}
_TORCH_TO_ST = {torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
                torch.float64: "F64", torch.int64: "I64", torch.int32: "I32",
                torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}


def tensor_bytes(t):
    """Raw little-endian bytes of a torch tensor (C order)."""
    t = t.detach().cpu().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().astype("<i2", copy=False).tobytes()
    a = t.numpy()
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def write_safetensors(path, tensors):
    """tensors: iterable of (name, torch.Tensor) in the order to store them. Each tensor is
    written in its own dtype (convert beforehand). Data is produced one tensor at a time."""
    items = list(tensors.items()) if isinstance(tensors, dict) else list(tensors)
    header = {}
    off = 0
    for name, t in items:
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _TORCH_TO_ST[t.dtype], "shape": list(t.shape),
                        "data_offsets": [off, off + n]}
        off += n
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    pad = (-(8 + len(hb))) % 8
    hb += b" " * pad
    with atomic_write(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for name, t in items:
            f.write(tensor_bytes(t))
    return 8 + len(hb) + off


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 1024 * 1024:
            raise ValueError(f"{path}: not a safetensors file (header length {n})")
        hdr = json.loads(f.read(n).decode("utf-8"))
    hdr.pop("__metadata__", None)
    return n, hdr


def read_safetensors(path, names=None):
    """Returns an ordered dict name -> torch.Tensor (copies; file order by data offset). With
    `names` (a set), only the tensors whose names are in it are read."""
    n, hdr = read_header(path)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in sorted(hdr.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if names is not None and name not in names:
            continue
        b, e = info["data_offsets"]
        shape = info["shape"]
        dt = info["dtype"]
        buf = np.array(data[b:e])  # copy
        if dt == "BF16":
            t = torch.from_numpy(buf.view("<i2").astype(np.int16)).view(torch.bfloat16)
        elif dt in _ST_TO_NP:
            t = torch.from_numpy(buf.view(np.dtype(_ST_TO_NP[dt]).newbyteorder("<")).astype(_ST_TO_NP[dt]))
        else:
            raise ValueError(f"{path}: tensor {name} has unsupported dtype {dt}")
        out[name] = t.reshape(shape)
    return out
