"""python3 -m tessera_eval {fid,stats,clip} ...: see docs/quality.md ("Real models")."""
import argparse
import json
import math
import sys

from .images import EvalError


def _fid(a):
    from .fid import FeatureNetwork, fid
    net = FeatureNetwork(a.classifier)
    value, n_gen, n_ref = fid(a.generated, a.reference, net, a.batch)
    res = {"fid": value, "n": n_gen, "reference_n": n_ref, "features": net.name}
    print(f"FID {value:.4f}  (n={n_gen} against reference_n={n_ref}, features {net.name})")
    return res


def _stats(a):
    from .fid import FeatureNetwork, folder_statistics, save_statistics
    net = FeatureNetwork(a.classifier)
    mu, sigma, n = folder_statistics(a.folder, net, a.batch)
    save_statistics(a.output, mu, sigma, n, net.name)
    print(f"wrote {a.output}: mean and covariance of {n} images' {mu.shape[0]}-d features ({net.name})")
    return {"output": a.output, "n": n, "features": net.name}


def _clip(a):
    from .clip import clip_scores
    paths, texts, scores = clip_scores(a.generated, a.model, a.texts, a.classes_json, a.template)
    n = len(scores)
    mean = sum(scores) / n
    sd = math.sqrt(sum((s - mean) ** 2 for s in scores) / (n - 1)) if n > 1 else float("nan")
    print(f"CLIP score {mean:.3f} ± {1.96 * sd / math.sqrt(n):.3f} (95% normal interval, n={n}, model {a.model})")
    return {"clip_score": mean, "n": n, "model": a.model, "template": a.template,
            "images": [{"file": p, "text": t, "clip_score": s} for p, t, s in zip(paths, texts, scores)]}


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m tessera_eval", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    def features_flags(p):
        p.add_argument("--classifier", metavar="DIR",
                       help="features of a tessera classifier (e.g. models/emoji/classifier) instead "
                            "of InceptionV3's 2048-d pool features")
        p.add_argument("--batch", type=int, default=50, help="images per forward pass (default 50)")

    p = sub.add_parser("fid", help="FID of a folder of images against a folder or a stats .npz")
    p.add_argument("generated", help="folder of generated images")
    p.add_argument("reference", help="folder of reference images, or a .npz from `stats`")
    features_flags(p)
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.set_defaults(run=_fid)

    p = sub.add_parser("stats", help="reference statistics (feature mean and covariance) of a folder")
    p.add_argument("folder")
    p.add_argument("-o", "--output", required=True, metavar="FILE.npz")
    features_flags(p)
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    p.set_defaults(run=_stats)

    p = sub.add_parser("clip", help="CLIP score of each image against its prompt, caption or class name")
    p.add_argument("generated", help="folder of images written by tessera generate")
    p.add_argument("--model", default="openai/clip-vit-large-patch14",
                   help="transformers CLIP model: a hub name or a local directory "
                        "(default openai/clip-vit-large-patch14, torchmetrics' default)")
    p.add_argument("--template", default="{}", help='text around the prompt, e.g. "a photo of a {}"')
    p.add_argument("--classes-json", metavar="FILE",
                   help="class names for images that record only a class id (default: the "
                        "classes.json of the model recorded in the image)")
    p.add_argument("--texts", metavar="FILE", help="JSON object: image file name -> text (overrides the metadata)")
    p.add_argument("--json", metavar="FILE", help="also write the per-image scores as JSON")
    p.set_defaults(run=_clip)

    a = ap.parse_args(argv)
    if getattr(a, "batch", 1) < 1:
        ap.error("--batch must be >= 1")
    try:
        res = a.run(a)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)
    except (EvalError, OSError) as e:
        print(f"tessera_eval: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
