"""CLIP score with torchmetrics' CLIPScore: 100 * max(cos(E_image, E_text), 0) per image (Hessel
et al. 2021, eq. 1 with w = 100 as torchmetrics scales it), and its mean over the images."""
import json
import os

import torch

from .images import EvalError, image_paths, image_text, load_images

DEFAULT_MODEL = "openai/clip-vit-large-patch14"  # torchmetrics' default


def clip_metric(model):
    """CLIPScore with a transformers CLIP model: a hub name (downloaded once into the
    Hugging Face cache) or a local directory saved with save_pretrained (model + processor)."""
    try:
        from torchmetrics.multimodal.clip_score import CLIPScore
    except ImportError as e:
        raise EvalError(f"the CLIP score needs torchmetrics and transformers ({e}); install them "
                        "with scripts/setup-deps.sh (docs/quality.md)") from None
    try:
        m = CLIPScore(model_name_or_path=model)
    except OSError as e:
        raise EvalError(f"cannot load the CLIP model {model!r}: {str(e).splitlines()[0]}") from None
    except ModuleNotFoundError as e:
        raise EvalError(f"the CLIP score needs transformers ({e}); scripts/setup-deps.sh") from None
    m.eval()
    return m


def texts_for(paths, texts_json=None, classes_json=None, template="{}"):
    """The text of each image: from --texts (a JSON object file name -> text) when given, else
    from the image's tessera settings (images.image_text), put into the template."""
    given = None
    if texts_json:
        try:
            with open(texts_json) as f:
                given = json.load(f)
        except (OSError, ValueError) as e:
            raise EvalError(f"{texts_json}: cannot read texts ({e})") from None
        if not isinstance(given, dict):
            raise EvalError(f"{texts_json}: expected a JSON object mapping file names to texts")
    out = []
    for p in paths:
        if given is not None:
            name = os.path.basename(p)
            if name not in given:
                raise EvalError(f"{texts_json}: no text for {name}")
            t = given[name]
        else:
            t = image_text(p, classes_json)
        out.append(template.replace("{}", t))
    return out


def clip_scores(folder, model=DEFAULT_MODEL, texts_json=None, classes_json=None, template="{}"):
    """Per-image CLIP scores of a folder, with the texts; returns (paths, texts, scores [n])."""
    if "{}" not in template:
        raise EvalError(f"--template {template!r} has no {{}} for the text")
    paths = image_paths(folder)
    texts = texts_for(paths, texts_json, classes_json, template)
    metric = clip_metric(model)
    scores = []
    with torch.no_grad():
        for p, t in zip(paths, texts):
            img = torch.from_numpy(load_images([p])[0]).permute(2, 0, 1).contiguous()
            # One image per call: forward() returns that image's score and accumulates the mean.
            scores.append(float(metric(img, t)))
    return paths, texts, scores
