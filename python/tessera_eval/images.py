"""Folders of tessera's PNGs: pixels, and the generation settings each PNG carries.

tessera stores its settings in a PNG text chunk "parameters" as "key=value; key=value" with '\\'
and ';' escaped by '\\' (tools/cli/run_settings.cpp, RunSettings::text). The keys used here:
"caption" (text-conditioned models), "prompt" (the prompt as typed, for class models), "class"
(the class id) and "model" (the model, whose classes.json names the classes: by name, such as
"emoji/target", or in images made before models were recorded by name, its directory).
"""
import json
import os

import numpy as np
from PIL import Image

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")


class EvalError(Exception):
    """Bad input: reported as one line and a non-zero exit by the command line."""


def parse_settings(text, source):
    """RunSettings::text() back to an ordered list of (key, value)."""
    out, key, value, in_value = [], "", "", False
    i = 0
    while i < len(text):
        c = text[i]
        if not in_value:
            if c == "=":
                in_value = True
            elif c in ";\n":
                raise EvalError(f"{source}: malformed parameters (expected key=value; ...)")
            elif not (c == " " and not key):
                key += c
        elif c == "\\" and i + 1 < len(text):
            i += 1
            value += text[i]
        elif c == ";":
            out.append((key, value))
            key, value, in_value = "", "", False
        elif c == "\n":
            raise EvalError(f"{source} holds the parameters of several images (a --grid sheet?); "
                            "give one PNG per image")
        else:
            value += c
        i += 1
    if key or in_value:
        if not in_value:
            raise EvalError(f"{source}: malformed parameters (expected key=value; ...)")
        out.append((key, value))
    return out


def image_paths(folder):
    """The image files of a folder, sorted by name (not recursive)."""
    if not os.path.isdir(folder):
        raise EvalError(f"{folder}: not a folder")
    paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.lower().endswith(IMAGE_SUFFIXES))
    if not paths:
        raise EvalError(f"{folder}: no images (.png, .jpg, .webp)")
    return paths


def load_images(paths, size=None):
    """uint8 [n, H, W, 3] (RGB). All images must have one size (tessera writes one per run);
    `size`, when given, is the size every image must have."""
    arrays = []
    for p in paths:
        try:
            with Image.open(p) as im:
                a = np.asarray(im.convert("RGB"))
        except OSError as e:
            raise EvalError(f"{p}: cannot read the image ({e})") from None
        if arrays and a.shape != arrays[0].shape:
            raise EvalError(f"{p}: {a.shape[1]}x{a.shape[0]} pixels, but {paths[0]} has "
                            f"{arrays[0].shape[1]}x{arrays[0].shape[0]}")
        if size is not None and a.shape[:2] != (size, size):
            raise EvalError(f"{p}: {a.shape[1]}x{a.shape[0]} pixels; this feature network takes {size}x{size}")
        arrays.append(a)
    return np.stack(arrays)


def settings(path):
    """The tessera settings stored in an image (a dict; empty when it has none)."""
    with Image.open(path) as im:
        text = getattr(im, "text", None) or {}
        raw = text.get("parameters", im.info.get("parameters"))
    return dict(parse_settings(raw, path)) if raw else {}


_class_names = {}


def class_name(classes_json, class_id, source):
    """The name of a class in a model's classes.json ("red apple")."""
    if classes_json not in _class_names:
        try:
            with open(classes_json) as f:
                _class_names[classes_json] = [c["name"] for c in json.load(f)["classes"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise EvalError(f"{classes_json}: cannot read class names ({e})") from None
    names = _class_names[classes_json]
    if not 0 <= class_id < len(names):
        raise EvalError(f"{source}: class {class_id} is not in {classes_json} ({len(names)} classes)")
    return names[class_id]


# The repository's models/ (python/tessera_eval/../../models).
_MODELS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                       "models")


def model_classes_json(recorded):
    """The classes.json of the model an image records, or None: a name ("emoji/target") is looked
    up as a path, beside $TESSERA_DEFAULT_MODEL's family and under the repository's models/; an
    older image's absolute directory is used as it is."""
    candidates = [recorded]
    env = os.environ.get("TESSERA_DEFAULT_MODEL")
    if env and not os.path.isabs(recorded):
        candidates.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(env))), recorded))
    if not os.path.isabs(recorded):
        candidates.append(os.path.join(_MODELS, recorded))
    for c in candidates:
        if os.path.isfile(os.path.join(c, "classes.json")):
            return os.path.join(c, "classes.json")
    return None


def image_text(path, classes_json=None):
    """The text an image was generated for: its caption, else the prompt as typed, else its class's
    name in classes_json (default: the classes.json of the model recorded in the image)."""
    s = settings(path)
    if s.get("caption"):
        return s["caption"]
    if s.get("prompt"):
        return s["prompt"]
    if "class" in s:
        try:
            c = int(s["class"])
        except ValueError:
            raise EvalError(f"{path}: class {s['class']!r} is not a number") from None
        cj = classes_json or (model_classes_json(s["model"]) if "model" in s else None)
        if cj is None:
            raise EvalError(f"{path}: class {c} of model {s.get('model', '(none recorded)')!r}, whose "
                            "classes.json was not found; give --classes-json")
        return class_name(cj, c, path)
    raise EvalError(f"{path}: no tessera settings with a caption, prompt or class (not made by "
                    "tessera generate?); give the texts with --texts")
