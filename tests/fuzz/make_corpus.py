#!/usr/bin/env python3
"""Writes the fuzz seed corpora tests/fuzz/corpus/<target>/ from the test fixtures and the shipped
emoji model, cut down to small files (the committed corpus stays well under 1 MB), plus hand-made
seeds for what the fixtures lack (every dtype, .npy versions 2 and 3, PNG colour types, bit depths,
interlacing and text chunks).

Usage: tests/fuzz/make_corpus.py [ROOT]   (standard library only; rewrites the corpus directories)
"""
import hashlib
import json
import pathlib
import shutil
import struct
import sys
import zlib

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
FIXTURES = ROOT / "tests" / "fixtures"
OUT = ROOT / "tests" / "fuzz" / "corpus"

ST_SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4, "I64": 8, "U8": 1}


def write(target, name, data):
    d = OUT / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


# ---- safetensors ----------------------------------------------------------------------------------

def safetensors(entries, metadata=None):
    """entries: [(name, dtype, shape, bytes)] -> a file, tensors stored in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + data


def small_from_fixture(path, keep=6):
    """The fixture's smallest tensors (real names, dtypes, shapes and bytes), re-packed."""
    blob = path.read_bytes()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", None)
    items = sorted(header.items(), key=lambda kv: (kv[1]["data_offsets"][1] - kv[1]["data_offsets"][0], kv[0]))
    entries = []
    for name, e in items[:keep]:
        b, en = e["data_offsets"]
        entries.append((name, e["dtype"], e["shape"], blob[8 + n + b:8 + n + en]))
    return safetensors(entries, meta)


def safetensors_corpus():
    seen = set()
    for path in sorted(FIXTURES.rglob("*.safetensors")) + sorted((ROOT / "models").rglob("*.safetensors")):
        data = small_from_fixture(path)
        digest = hashlib.sha1(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        rel = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", "_")
        write("safetensors", rel + ".safetensors", data)
    every_dtype = [(f"t_{d.lower()}", d, [2, 3], bytes(range(6 * s))) for d, s in ST_SIZES.items()]
    write("safetensors", "every_dtype.safetensors", safetensors(every_dtype, {"format": "pt"}))
    write("safetensors", "empty_tensor.safetensors",
          safetensors([("empty", "F32", [0, 4], b""), ("scalar", "F32", [], b"\0\0\x80?")]))
    write("safetensors", "no_tensors.safetensors", safetensors([]))


# ---- npy ------------------------------------------------------------------------------------------

def npy(descr, shape, raw, version=1, fortran=False):
    dims = ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "")
    text = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({dims}), }}"
    prefix = 10 if version == 1 else 12
    text += " " * (-(prefix + len(text) + 1) % 64) + "\n"
    length = struct.pack("<H", len(text)) if version == 1 else struct.pack("<I", len(text))
    return b"\x93NUMPY" + bytes([version, 0]) + length + text.encode() + raw


def npy_corpus():
    for path in sorted(FIXTURES.rglob("*.npy")):
        if path.stat().st_size <= 4096:
            rel = path.relative_to(FIXTURES).as_posix().replace("/", "_")
            write("npy", rel, path.read_bytes())
    for descr, size in [("<f4", 4), ("<f2", 2), ("<f8", 8), ("<i4", 4), ("<i8", 8), ("|u1", 1)]:
        name = descr.strip("<|")
        write("npy", f"{name}_2x3.npy", npy(descr, [2, 3], bytes(range(6 * size))))
    write("npy", "v2.npy", npy("<f4", [3], b"\0" * 12, version=2))
    write("npy", "v3.npy", npy("<i4", [1, 1, 2], b"\1" * 8, version=3))
    write("npy", "scalar.npy", npy("<f8", [], b"\0" * 8))
    write("npy", "empty.npy", npy("<f4", [0, 5], b""))
    write("npy", "fortran.npy", npy("<f4", [2, 2], b"\0" * 16, fortran=True))
    write("npy", "big_endian.npy", npy(">f4", [1], b"\0" * 4))


# ---- config.json and classes.json -----------------------------------------------------------------

def config_corpus():
    seen = set()
    paths = sorted(FIXTURES.rglob("config.json")) + sorted((ROOT / "models").rglob("config.json"))
    for path in paths:
        data = path.read_bytes()
        if data in seen:
            continue
        seen.add(data)
        rel = path.relative_to(ROOT).parent.as_posix().replace("/", "_")
        write("config", rel + "_config.json", data)
    # The emoji classes.json cut to its first three emoji in every style.
    classes = json.loads((ROOT / "models" / "emoji" / "target" / "classes.json").read_text())
    keep = classes["classes"][:9]
    names = {c["name"] for c in keep}
    cut = dict(classes, classes=keep,
               aliases={k: v for k, v in classes.get("aliases", {}).items() if k in names},
               held_out_classes=[i for i in classes.get("held_out_classes", []) if i < len(keep)] + [2])
    write("config", "emoji_classes.json", json.dumps(cut).encode())
    write("config", "plain_classes.json",
          b'{"classes": [{"name": "red apple"}, {"name": "green apple", "category": "Food"}]}')


# ---- png ------------------------------------------------------------------------------------------

def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2)]


def png(width, height, color, depth, pixel, interlace=False, extra=b"", text_after=b""):
    """pixel(x, y) -> the sample values of one pixel; rows packed MSB first as the format says."""
    channels = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[color]

    def rows(xs, ys):
        out = b""
        for y in ys:
            bits, nbits = 0, 0
            line = bytearray()
            for x in xs:
                for v in pixel(x, y):
                    if depth == 16:
                        line += struct.pack(">H", v)
                    elif depth == 8:
                        line.append(v)
                    else:
                        bits, nbits = (bits << depth) | v, nbits + depth
                        if nbits == 8:
                            line.append(bits)
                            bits, nbits = 0, 0
            if nbits:
                line.append(bits << (8 - nbits))
            out += b"\0" + bytes(line)
        return out

    if interlace:
        raw = b""
        for x0, y0, dx, dy in ADAM7:
            xs, ys = range(x0, width, dx), range(y0, height, dy)
            if len(xs) and len(ys):
                raw += rows(xs, ys)
    else:
        raw = rows(range(width), range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, depth, color, 0, 0, 1 if interlace else 0)
    del channels
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + extra + chunk(b"IDAT", zlib.compress(raw)) +
            text_after + chunk(b"IEND", b""))


def png_corpus():
    text = chunk(b"tEXt", b"parameters\0model=emoji; class=3; seed=1; cfg=1.000")
    ztxt = chunk(b"zTXt", b"Comment\0\0" + zlib.compress(b"compressed text " * 8))
    itxt = chunk(b"iTXt", b"Title\0\0\0en\0Title\0" + "\u00e9moji".encode())
    write("png", "rgb8_text.png", png(5, 3, 2, 8, lambda x, y: (x * 40, y * 80, 7), extra=text))
    write("png", "rgba8_ztxt.png", png(4, 4, 6, 8, lambda x, y: (x, y, 200, 128), extra=ztxt))
    write("png", "gray1.png", png(9, 2, 0, 1, lambda x, y: ((x + y) & 1,)))
    write("png", "gray4_itxt_after.png", png(3, 3, 0, 4, lambda x, y: (x * 5,), text_after=itxt))
    write("png", "gray_alpha16.png", png(2, 2, 4, 16, lambda x, y: (x * 30000, 65535)))
    palette = chunk(b"PLTE", bytes([255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9]))
    trns = chunk(b"tRNS", bytes([255, 128]))
    write("png", "palette2_trns.png", png(6, 2, 3, 2, lambda x, y: ((x + y) % 4,), extra=palette + trns))
    write("png", "rgb16.png", png(2, 3, 2, 16, lambda x, y: (x * 999, y * 777, 65535)))
    write("png", "rgb8_interlaced.png", png(11, 9, 2, 8, lambda x, y: (x * 20, y * 25, x ^ y), interlace=True))
    write("png", "one_pixel.png", png(1, 1, 2, 8, lambda x, y: (1, 2, 3)))


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    safetensors_corpus()
    npy_corpus()
    config_corpus()
    png_corpus()
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    count = sum(1 for f in OUT.rglob("*") if f.is_file())
    print(f"make_corpus: {count} files, {total} bytes in {OUT.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
