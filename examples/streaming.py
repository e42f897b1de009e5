"""An image filling in, with the package's streaming API (tessera.Generation): every few steps
the requests' previews (their tokens so far decoded, the rest grey) become frames of an animated
GIF, as a notebook would show them (IPython.display.display(preview) in place of the frames).

    python examples/streaming.py [OUT.gif] [--method sd] [--prompts "red apple" banana]
"""
import argparse

import tessera


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", nargs="?", default="filling_in.gif")
    ap.add_argument("-m", "--model", default=None, help="default: the emoji model")
    ap.add_argument("--method", default="sd")
    ap.add_argument("--prompts", nargs="+", default=["red apple", "banana", "tiger face"])
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    pipe = tessera.Pipeline(a.model)
    gen = pipe.start_generation(method=a.method, batch=len(a.prompts))
    ids = [gen.add(p, seed=a.seed, image_index=i) for i, p in enumerate(a.prompts)]
    frames, finished = [], {}
    while gen.step():
        frames.append([finished[i] if i in finished else gen.preview(i) for i in ids])
        for f in gen.poll():
            finished[f.id] = f.image()
            print(f"{a.prompts[ids.index(f.id)]}: {f.stats['tokens']} tokens in "
                  f"{f.stats['rounds']} rounds (mean accepted length "
                  f"{f.stats['mean_accepted_length']:.2f})")
    frames.append([finished[i] for i in ids])
    # One row per frame: the requests side by side.
    from PIL import Image
    size = pipe.image_size
    rows = []
    for strip in frames:
        row = Image.new("RGB", (size * len(strip), size))
        for k, im in enumerate(strip):
            row.paste(im, (k * size, 0))
        rows.append(row.resize((row.width * 2, row.height * 2), Image.NEAREST))
    rows[0].save(a.out, save_all=True, append_images=rows[1:], duration=60, loop=0)
    print(f"{a.out}: {len(rows)} frames")


if __name__ == "__main__":
    main()
