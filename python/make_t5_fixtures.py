#!/usr/bin/env python3
"""Deterministically builds the T5 text-encoder fixtures under tests/fixtures/t5/ with the reference
code itself (transformers' T5 classes and tokenizers, the sentencepiece trainer), converts them with
tools/convert_t5.py, and writes goldens for tessera's C++ T5 encoder and tokenizer.

Needs transformers (not in Debian), so it runs in a venv over Debian's torch and numpy:

  /usr/bin/python3 -m venv --system-site-packages /tmp/t5venv
  /tmp/t5venv/bin/pip install -r python/t5_fixture_requirements.txt
  /tmp/t5venv/bin/python python/make_t5_fixtures.py

What it writes (tests/fixtures/t5/, golden/manifest.json describes every golden):
  hf/      a tiny random T5 v1.1 encoder (d_model 32, 2 layers, 4 heads, gated-gelu) and a small
           SentencePiece unigram model trained here on a generated English-like corpus, in the
           Hugging Face layout (save_pretrained of T5EncoderModel and T5Tokenizer)
  f32/ bf16/  tools/convert_t5.py's output for it (spiece.model: links to hf/'s)
  golden/  prompts.json (the prompt corpus), token ids from AutoTokenizer (what LlamaGen uses),
           encoder hidden states (f32 and bf16), and LlamaGen t2i greedy tokens from captions made by
           the encoder (the tiny t2i GPT of tests/fixtures/llamagen, T = 8).
"""
import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import sentencepiece as spm  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoTokenizer, T5Config, T5EncoderModel, T5Tokenizer  # noqa: E402

from make_test_fixtures import N as T2I_STEPS, gpt_args, margins  # noqa: E402
from tessera_ref.dedupe import link_identical  # noqa: E402
from tessera_ref.llamagen import Transformer, generate  # noqa: E402

OUT = os.path.join(ROOT, "tests", "fixtures", "t5")
T2I_PT = os.path.join(ROOT, "tests", "fixtures", "llamagen", "pt", "t2i_gpt.pt")
PY_CONVERT = "/usr/bin/python3"  # the converter runs on Debian's python (no transformers)
MAX_LEN = 120  # LlamaGen's t5_feature_max_len
T2I_T = 8      # cls_token_num of the tiny t2i fixture
TINY = dict(d_model=32, d_kv=8, num_heads=4, d_ff=64, num_layers=2, relative_attention_num_buckets=32,
            relative_attention_max_distance=128)
SPM_VOCAB = 640
EXTRA_IDS = 100
N_HIDDEN = 64   # prompts with f32 hidden-state goldens
N_BF16 = 8      # prompts with bf16 hidden-state goldens


# ----------------------------------------------------------------------------------------------
# the training corpus of the SentencePiece model
# ----------------------------------------------------------------------------------------------

ADJ = ("red blue green yellow purple orange black white golden silver small large tiny huge old young "
       "ancient modern quiet noisy bright dark misty sunny rainy snowy wooden glass marble stone shiny "
       "fluffy wet dry happy sleepy curious lonely colorful vintage futuristic cozy elegant wild calm").split()
NOUN = ("cat dog horse bird fish owl fox bear rabbit tiger lion elephant dragon robot astronaut knight "
        "wizard girl boy woman man child family teacher farmer sailor chef painter musician house castle "
        "tower bridge river lake ocean beach mountain forest garden field desert island village city street "
        "market cafe library kitchen window door table chair lamp book clock flower tree rose tulip apple "
        "banana cake bread cup teapot bicycle car train boat ship airplane balloon kite guitar piano violin "
        "painting photograph sculpture portrait landscape sky cloud moon sun star rainbow storm sunset "
        "sunrise night morning evening winter summer autumn spring").split()
VERB = ("sitting standing sleeping running flying swimming reading painting playing walking dancing "
        "jumping eating drinking looking waiting singing climbing riding floating glowing").split()
PREP = "on in under near beside behind above with at across through inside".split()
STYLE = ("oil painting, watercolor, digital art, photo, photograph, 3d render, pencil sketch, anime style, "
         "pixel art, studio lighting, high detail, 4k, 8k, highly detailed, trending on artstation, "
         "cinematic, soft light, bokeh, wide angle, macro shot, isometric, low poly").split(", ")
NAMES = ("Paris London Tokyo Berlin Rome Madrid Vienna Prague Lisbon Dublin Oslo Cairo Sydney Toronto "
         "Chicago Boston Alice Bob Carol David Emma Frank Grace Henry Van Gogh Monet Picasso Rembrandt").split()
ACCENTED = ("café naïve façade crème brûlée São Paulo Zürich Málaga résumé piñata jalapeño über Ångström "
            "Ærø Kraków Łódź smørrebrød déjà vu fiancée Bogotá Hawaiʻi").split()
OTHER_SCRIPTS = "москва зимой кот собака αθήνα ήλιος θάλασσα".split()  # a few pieces, most chars stay unknown


def corpus(seed, n=3000):
    r = random.Random(seed)
    pick = r.choice

    def noun_phrase():
        s = f"{pick(['a', 'an', 'the', 'two', 'three', 'some', 'many'])} "
        if r.random() < 0.7:
            s += pick(ADJ) + " "
        if r.random() < 0.3:
            s += pick(ADJ) + " "
        return s + pick(NOUN) + ("s" if r.random() < 0.2 else "")

    templates = [
        lambda: f"{noun_phrase()} {pick(VERB)} {pick(PREP)} {noun_phrase()}",
        lambda: f"{noun_phrase()} {pick(PREP)} {noun_phrase()}, {pick(STYLE)}",
        lambda: f"a {pick(STYLE)} of {noun_phrase()} in {pick(NAMES)}",
        lambda: f"{pick(NAMES)} and {pick(NAMES)} {pick(VERB)} {pick(PREP)} the {pick(NOUN)}.",
        lambda: f"{noun_phrase().capitalize()} {pick(VERB)} at {r.randint(1, 12)}:{r.randint(0, 59):02d} "
                f"{pick(['am', 'pm'])}!",
        lambda: f"{r.randint(2, 2000)} {pick(NOUN)}s {pick(PREP)} {noun_phrase()}, {r.uniform(0, 100):.1f}% "
                f"{pick(ADJ)}",
        lambda: f"\"{noun_phrase()}\" ({pick(STYLE)}) - {pick(ADJ)} and {pick(ADJ)}?",
        lambda: f"a {pick(NOUN)} {pick(PREP)} a {pick(ACCENTED)} {pick(NOUN)}, {pick(STYLE)}",
        lambda: f"{pick(ACCENTED)} {pick(ACCENTED)} {pick(NOUN)}",
        lambda: f"{noun_phrase().upper()} {pick(VERB).upper()}",
        lambda: f"version {r.randint(0, 9)}.{r.randint(0, 20)}; size {r.randint(1, 99)}x{r.randint(1, 99)} "
                f"cm; price ${r.randint(1, 500)}.{r.randint(0, 99):02d}",
    ]
    out = []
    for i in range(n):
        s = pick(templates)()
        if r.random() < 0.3:
            s = s[0].upper() + s[1:]
        out.append(s)
    out += OTHER_SCRIPTS * 3
    return out


def train_spm(seed):
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(corpus(seed)), model_writer=buf, vocab_size=SPM_VOCAB, model_type="unigram",
        pad_id=0, eos_id=1, unk_id=2, bos_id=-1, pad_piece="<pad>", eos_piece="</s>", unk_piece="<unk>",
        normalization_rule_name="nmt_nfkc", character_coverage=1.0, num_threads=1, minloglevel=2,
        shuffle_input_sentence=False, seed_sentencepiece_size=100000)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------
# the prompt corpus
# ----------------------------------------------------------------------------------------------

def prompt_corpus(seed):
    """(prompts, kinds): round-robin over the kinds so that the first N_HIDDEN prompts hold each."""
    r = random.Random(seed + 1)
    caption = []
    for _ in range(110):
        s = (f"{r.choice(['a', 'an', 'the', 'two'])} {r.choice(ADJ)} {r.choice(NOUN)} {r.choice(VERB)} "
             f"{r.choice(PREP)} {r.choice(['a', 'the'])} {r.choice(ADJ)} {r.choice(NOUN)}")
        if r.random() < 0.5:
            s += f", {r.choice(STYLE)}"
        caption.append(s)
    kinds = {
        "plain caption": caption,
        "capitals": ["A RED CAR IN THE RAIN", "The Eiffel Tower In Paris At Night", "NASA astronaut on MARS",
                     "McDonald's iPhone eBay", "CamelCaseWordsTogether", "Hello World", "ALL CAPS SHOUTING!!!",
                     "Van Gogh Starry Night"],
        "numbers": ["3.14159", "1,000,000 stars", "version 2.0.1", "50% off", "-273.15 degrees", "4k 8k 16k",
                    "the year 1999", "0.5 + 0.25 = 0.75", "call 555-0123", "12:30 pm", "1st 2nd 3rd 4th",
                    "1e-6", "007", "3/4 cup of sugar"],
        "punctuation": ["Hello, world!", "what?!", "(parenthetical) [bracket] {brace}", "user@example.com",
                        "quotes \"double\" and 'single'", "wait... what", "a -- b --- c", "#hashtag @mention",
                        "C++ & C#", "path/to/file.png", "semi;colon:colon", "100$ 50€ 20£ 10¥", "~tilde~ ^caret^",
                        "a_b_c", "<b>bold</b> html", "*stars* and _underscores_", "«guillemets» „low“ ‚single‘",
                        "em—dash en–dash", "‘curly’ “quotes”", "…ellipsis char", "a | b \\ c"],
        "accented latin": ["café au lait", "naïve façade", "Ærøskøbing harbour", "São Paulo skyline",
                           "Zürich in winter", "Ångström unit", "ŁÓDŹ street", "crème brûlée", "piñata jalapeño",
                           "cafe\u0301 with a combining accent", "déjà vu", "Œuvre complète", "ßtraße",
                           "İstanbul ılık", "Dvořák Smetana"],
        "cyrillic": ["Москва зимой", "красная площадь ночью", "кот на окне", "Привет, мир!", "ёжик в тумане"],
        "greek": ["Ακρόπολη", "αβγ δεζ", "ήλιος και θάλασσα", "Σωκράτης", "μ = 0.5"],
        "cjk": ["東京の夜景", "一只猫", "한국어 텍스트", "富士山と桜", "汉字 and latin", "カタカナ ひらがな",
                "中文，标点。", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３"],
        "emoji": ["🐱", "a cat 🐱 on a mat", "👨‍👩‍👧‍👦 family portrait", "thumbs up 👍🏽", "🏳️‍🌈 flag",
                  "❤️ love", "🚀🌕✨", "👩🏿‍🚀 astronaut", "smile :) ☺", "🇯🇵 flag of japan"],
        "whitespace": ["  leading spaces", "trailing spaces   ", "multiple   spaces   between", "tab\tseparated",
                       "new\nline", "carriage\r\nreturn", "\u00a0no-break space", "ideographic\u3000space",
                       " ", "\t\n", "a\u2028line separator", "zero\u200bwidth space", "soft\u00adhyphen",
                       "   many    kinds \t of \n space   "],
        "unusual": ["a\u2581b meta symbol", "ﬁne ligature ﬀ", "x² and H₂O", "™ ® ©", "① ② ③", "Ⅻ roman",
                    "control\x07bell", "½ cup", "㎏ ㎡", "a\u0000nul"],
        "single word": ["cat", "A", "x", "1", ".", "supercalifragilisticexpialidocious", "painting", "Zebra",
                        "antidisestablishmentarianism", "the"],
    }
    long_texts = []
    for k in range(8):
        words = []
        while len(words) < 90 + 25 * k:
            words += corpus(seed + 100 + k, 1)[0].split()
        long_texts.append(" ".join(words))
    long_texts.append("an extremely detailed painting " * 40)
    long_texts.append("München Zürich café 東京 🐱 " * 30)
    kinds["long (truncated)"] = long_texts
    prompts, tags = [], []
    lists = {k: list(v) for k, v in kinds.items()}
    while any(lists.values()):
        for k, v in lists.items():
            if v:
                prompts.append(v.pop(0))
                tags.append(k)
    return prompts, tags


# ----------------------------------------------------------------------------------------------
# the tiny encoder
# ----------------------------------------------------------------------------------------------

@torch.no_grad()
def init_t5(m, g):
    """Random weights at scales that keep the hidden states varied (T5 has no 1/sqrt(d_kv) in its
    attention: q's scale stands in for it, as in transformers' own init)."""
    D, dkv, F = TINY["d_model"], TINY["d_kv"], TINY["d_ff"]
    for name, p in m.named_parameters():
        if name.endswith("layer_norm.weight"):
            p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
        elif name == "shared.weight":
            p.copy_(torch.randn(p.shape, generator=g))
        elif name.endswith("relative_attention_bias.weight"):
            p.copy_(1.0 * torch.randn(p.shape, generator=g))
        elif name.endswith(".q.weight"):
            p.copy_(2.0 * torch.randn(p.shape, generator=g) / (D * dkv) ** 0.5)
        elif name.endswith((".k.weight", ".v.weight", ".wi_0.weight", ".wi_1.weight")):
            p.copy_(1.5 * torch.randn(p.shape, generator=g) / D ** 0.5)
        elif name.endswith(".o.weight"):
            p.copy_(torch.randn(p.shape, generator=g) / (TINY["num_heads"] * dkv) ** 0.5)
        elif name.endswith(".wo.weight"):
            p.copy_(torch.randn(p.shape, generator=g) / F ** 0.5)
        else:
            raise RuntimeError(f"no init for {name}")


def hf_config(vocab_size):
    return T5Config(vocab_size=vocab_size, feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6,
                    dropout_rate=0.0, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0,
                    tie_word_embeddings=False, is_encoder_decoder=True, num_decoder_layers=TINY["num_layers"],
                    **TINY)


def bucket_table(max_len):
    """transformers' bucket of every relative position key - query in (-max_len, max_len), and the
    same formula in float64 (where they differ, float32 rounding decided)."""
    from transformers.models.t5.modeling_t5 import T5Attention
    import math
    rel = torch.arange(-(max_len - 1), max_len, dtype=torch.long)
    b = T5Attention._relative_position_bucket(rel, bidirectional=True,
                                              num_buckets=TINY["relative_attention_num_buckets"],
                                              max_distance=TINY["relative_attention_max_distance"])
    nb = TINY["relative_attention_num_buckets"] // 2
    me = nb // 2
    f64 = []
    for x in rel.tolist():
        a = abs(x)
        v = a if a < me else min(me + int(math.log(a / me) / math.log(TINY["relative_attention_max_distance"] / me)
                                          * (nb - me)), nb - 1)
        f64.append(v + (nb if x > 0 else 0))
    return rel.numpy(), b.numpy(), np.array(f64)


# ----------------------------------------------------------------------------------------------

def full_save_check(spm_path):
    """The fast tokenizer as save_pretrained leaves it (tokenizer.json), loaded from that file (no
    add_prefix_space in tokenizer_config.json, which would make transformers convert spiece.model again)."""
    import tempfile
    d = tempfile.mkdtemp(prefix="t5tok_")
    T5Tokenizer(vocab_file=spm_path, extra_ids=EXTRA_IDS).save_pretrained(d)
    AutoTokenizer.from_pretrained(d).save_pretrained(d)
    cfg_path = os.path.join(d, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    cfg.pop("add_prefix_space", None)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    os.remove(os.path.join(d, "spiece.model"))  # so that nothing can be converted from it
    tok = AutoTokenizer.from_pretrained(d)
    assert type(tok).__name__ == "T5TokenizerFast" and os.path.isfile(os.path.join(d, "tokenizer.json"))
    return tok


def ragged(rows):
    offs = np.zeros(len(rows) + 1, dtype="<i4")
    offs[1:] = np.cumsum([len(r) for r in rows])
    return offs


def convert(hf, out, dtype):
    r = subprocess.run([PY_CONVERT, os.path.join(ROOT, "tools", "convert_t5.py"), "--hf", hf, "--out", out,
                        "--dtype", dtype], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"convert_t5.py failed ({r.returncode}): {r.stderr.strip()}")
    print("  " + r.stdout.strip().replace("\n", "\n  "))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--min-margin", type=float, default=1e-3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    hf = os.path.join(OUT, "hf")
    gold = os.path.join(OUT, "golden")
    os.makedirs(hf)
    os.makedirs(gold)

    # ---- tokenizer: a SentencePiece unigram model, saved as T5Tokenizer saves it
    spm_bytes = train_spm(args.seed)
    if train_spm(args.seed) != spm_bytes:
        sys.exit("the SentencePiece trainer is not deterministic here")
    spm_path = os.path.join(OUT, "spiece.tmp.model")
    with open(spm_path, "wb") as f:
        f.write(spm_bytes)
    sp = spm.SentencePieceProcessor(model_file=spm_path)
    n_pieces = sp.get_piece_size()
    assert [sp.id_to_piece(i) for i in range(3)] == ["<pad>", "</s>", "<unk>"]
    slow = T5Tokenizer(vocab_file=spm_path, extra_ids=EXTRA_IDS, model_max_length=512)
    slow.save_pretrained(hf)
    # The tokenizer files of LlamaGen's T5 directories (the T5Embedder's download list: spiece.model,
    # tokenizer_config.json, special_tokens_map.json) with the keys of flan-t5-xl's tokenizer_config.json:
    # no tokenizer.json (385 KB here, most of it the normalizer's character map again), so
    # AutoTokenizer builds the fast tokenizer from spiece.model; full_save_check() shows that a
    # saved tokenizer.json tokenizes the same.
    os.remove(os.path.join(hf, "added_tokens.json"))
    extra = [f"<extra_id_{i}>" for i in range(EXTRA_IDS)]
    with open(os.path.join(hf, "tokenizer_config.json"), "w") as f:
        json.dump({"additional_special_tokens": extra, "eos_token": "</s>", "extra_ids": EXTRA_IDS,
                   "model_max_length": 512, "pad_token": "<pad>", "sp_model_kwargs": {},
                   "tokenizer_class": "T5Tokenizer", "unk_token": "<unk>"}, f, indent=2)
        f.write("\n")
    with open(os.path.join(hf, "special_tokens_map.json"), "w") as f:
        json.dump({"additional_special_tokens": extra, "eos_token": "</s>", "pad_token": "<pad>",
                   "unk_token": "<unk>"}, f, indent=2)
        f.write("\n")

    # ---- model
    vocab = n_pieces + EXTRA_IDS
    g = torch.Generator().manual_seed(args.seed)
    model = T5EncoderModel(hf_config(vocab)).eval()
    init_t5(model, g)
    model.save_pretrained(hf)
    model = T5EncoderModel.from_pretrained(hf).eval()  # what LlamaGen does (f32 here)

    tok = AutoTokenizer.from_pretrained(hf)
    slow = T5Tokenizer.from_pretrained(hf)
    full = full_save_check(spm_path)
    os.remove(spm_path)
    sp = spm.SentencePieceProcessor(model_file=os.path.join(hf, "spiece.model"))
    assert type(tok).__name__ == "T5TokenizerFast", type(tok)

    prompts, kinds = prompt_corpus(args.seed)
    specials = ["</s>", "<pad>", "<unk>", "<extra_id_"]
    assert all(p and not any(s in p for s in specials) for p in prompts)
    manifest = {"seed": args.seed, "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                                               "sentencepiece": spm.__version__, "numpy": np.__version__}}
    try:
        import tokenizers
        manifest["versions"]["tokenizers"] = tokenizers.__version__
    except ImportError:
        pass
    manifest["tiny"] = dict(TINY, vocab_size=vocab, spm_pieces=n_pieces, extra_ids=EXTRA_IDS,
                            feed_forward_proj="gated-gelu", layer_norm_epsilon=1e-6)
    manifest["goldens"] = {}

    def put(name, arr, desc):
        arr = np.ascontiguousarray(arr)
        np.save(os.path.join(gold, name), arr)
        manifest["goldens"][name] = dict(desc, shape=list(arr.shape), dtype=str(arr.dtype))

    with open(os.path.join(gold, "prompts.json"), "w", encoding="utf-8") as f:
        json.dump(prompts, f, ensure_ascii=False, indent=0)
        f.write("\n")
    manifest["prompts"] = {
        "file": "prompts.json", "count": len(prompts),
        "kinds": kinds,
        "notes": "No prompt holds an HF special-token string (</s>, <pad>, <unk>, <extra_id_N>) and none is empty: "
                 "the HF tokenizers would split those out as special tokens, which tessera's tokenizer need not do.",
    }

    # ---- token ids: the fast tokenizer (LlamaGen's AutoTokenizer), compared with the slow one and raw spm
    tk = dict(max_length=MAX_LEN, truncation=True, add_special_tokens=True)
    ids = [tok(p, **tk)["input_ids"] for p in prompts]
    put("ids.npy", np.concatenate([np.array(x, dtype="<i4") for x in ids]),
        {"what": "input_ids of every prompt, concatenated (ids_offsets.npy: prompt k is ids[off[k]:off[k+1]])",
         "tokenizer": "AutoTokenizer.from_pretrained(hf) = T5TokenizerFast, as LlamaGen's T5Embedder",
         "call": "tok(p, max_length=120, truncation=True, add_special_tokens=True), no padding: EOS (1) appended, "
                 "at most 119 pieces + EOS"})
    put("ids_offsets.npy", ragged(ids), {"what": "offsets into ids.npy, [P + 1]"})
    full_ids = [full(p, **tk)["input_ids"] for p in prompts]
    if full_ids != ids:
        sys.exit("the tokenizer loaded from a saved tokenizer.json differs from the one made from spiece.model")
    dis_slow, dis_spm = [], []
    for k, p in enumerate(prompts):
        s = slow(p, **tk)["input_ids"]
        raw = sp.encode(p)[:MAX_LEN - 1] + [1]
        if s != ids[k]:
            dis_slow.append({"index": k, "prompt": p, "fast": ids[k], "slow": s})
        if raw != ids[k]:
            dis_spm.append({"index": k, "prompt": p, "fast": ids[k], "sentencepiece": raw})
    manifest["tokenizer_disagreements"] = {
        "slow": {"what": "T5Tokenizer.from_pretrained(hf) (legacy default), same call, where it differs from ids.npy",
                 "cases": dis_slow},
        "sentencepiece": {"what": "SentencePieceProcessor(spiece.model).encode(p)[:119] + [1], where it differs "
                                  "from ids.npy", "cases": dis_spm},
    }
    print(f"  {len(prompts)} prompts, {sum(map(len, ids))} ids; slow differs on {len(dis_slow)}, "
          f"sentencepiece on {len(dis_spm)}; truncated: {sum(len(x) == MAX_LEN for x in ids)}")

    # ---- f32 hidden states, valid rows only
    with torch.no_grad():
        hid = [model(input_ids=torch.tensor([x]))["last_hidden_state"][0].numpy() for x in ids[:N_HIDDEN]]
    put("hidden_f32.npy", np.concatenate(hid).astype("<f4"),
        {"what": f"T5EncoderModel (f32) last_hidden_state of prompts 0..{N_HIDDEN - 1}, each alone without padding "
                 "(ids as in ids.npy), rows concatenated; hidden_offsets.npy", "compute": "f32"})
    put("hidden_offsets.npy", ragged(hid), {"what": "offsets into hidden_f32.npy rows, [65]"})
    allh = np.concatenate(hid)
    print(f"  hidden f32: {allh.shape}, std {allh.std():.3f}, mean |row-row| "
          f"{np.abs(allh[1:] - allh[:-1]).mean():.3f}")

    # ---- f32, padded batch as LlamaGen's get_text_embeddings (4 prompts)
    pad_idx = [0, 3, 11, kinds.index("long (truncated)")]
    batch = tok([prompts[k] for k in pad_idx], max_length=MAX_LEN, padding="max_length", truncation=True,
                return_attention_mask=True, add_special_tokens=True, return_tensors="pt")
    with torch.no_grad():
        hp = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])["last_hidden_state"]
    put("ids_padded.npy", batch["input_ids"].numpy().astype("<i4"),
        {"what": f"prompts {pad_idx} with padding='max_length' (120), truncation, pad id 0", "prompts": pad_idx})
    put("mask_padded.npy", batch["attention_mask"].numpy().astype("<i4"), {"what": "their attention_mask"})
    put("hidden_padded_f32.npy", hp.numpy().astype("<f4"),
        {"what": "T5EncoderModel(input_ids, attention_mask) last_hidden_state, one batch of 4, as LlamaGen's "
                 "T5Embedder.get_text_embeddings; rows at pad positions are the model's too (they attend to the "
                 "valid keys only; LlamaGen multiplies them by the mask)", "compute": "f32", "prompts": pad_idx})
    for j, k in enumerate(pad_idx):
        n = len(ids[k])
        if k < N_HIDDEN:
            d = np.abs(hp[j, :n].numpy() - hid[k]).max()
            print(f"  padded vs alone, prompt {k}: max |diff| {d:.2e}")

    # ---- bf16: the official way (from_pretrained with torch_dtype bf16 == .to(bfloat16))
    mb = T5EncoderModel.from_pretrained(hf, torch_dtype=torch.bfloat16).eval()
    mb2 = T5EncoderModel.from_pretrained(hf).eval().to(torch.bfloat16)
    hb = []
    with torch.no_grad():
        for x in ids[:N_BF16]:
            a = mb(input_ids=torch.tensor([x]))["last_hidden_state"][0]
            b = mb2(input_ids=torch.tensor([x]))["last_hidden_state"][0]
            assert torch.equal(a, b), "bf16 from_pretrained differs from .to(bfloat16)"
            hb.append(a.float().numpy())
    put("hidden_bf16.npy", np.concatenate(hb).astype("<f4"),
        {"what": f"last_hidden_state of prompts 0..{N_BF16 - 1} with the model in bf16 (T5EncoderModel.from_pretrained("
                 "torch_dtype=bfloat16), equal to .to(bfloat16)), valid rows, values as float32; hidden_bf16_offsets.npy",
         "compute": "bf16 weights and activations; layer-norm variance and softmax in f32 (transformers' T5)"})
    put("hidden_bf16_offsets.npy", ragged(hb), {"what": "offsets into hidden_bf16.npy rows"})
    d = np.concatenate(hb) - np.concatenate(hid[:N_BF16])
    print(f"  bf16 vs f32: max |diff| {np.abs(d).max():.3f}, rms {np.sqrt((d ** 2).mean()):.4f}")
    manifest["bf16_vs_f32"] = {"max_abs": float(np.abs(d).max()), "rms": float(np.sqrt((d ** 2).mean()))}

    # ---- relative position buckets
    rel, b32, b64 = bucket_table(MAX_LEN)
    put("relative_buckets.npy", np.stack([rel, b32]).astype("<i4"),
        {"what": "row 0: relative position key - query in [-119, 119]; row 1: transformers' bucket (bidirectional, "
                 "32 buckets, max_distance 128, log in float32)"})
    diff = [int(r) for r, x, y in zip(rel, b32, b64) if x != y]
    manifest["bucket_float32_vs_float64"] = {
        "relative_positions_that_differ": diff,
        "notes": "transformers computes log(|r| / 8) / log(128 / 8) * 8 on a float32 tensor and truncates; these are "
                 "the positions where the same formula in float64 gives another bucket"}
    print(f"  buckets: float32 and float64 differ at relative positions {diff}")

    # ---- end to end: LlamaGen t2i with T = 8 from the encoder's captions
    t2i = Transformer(gpt_args("t2i")).eval()
    t2i.load_state_dict(torch.load(T2I_PT, map_location="cpu")["model"])
    candidates = ["a red cat sitting on a wooden table", "Two Dogs", "  An Old Castle near the lake  ",
                  "a golden dragon flying above the misty mountains at sunset", "a blue bird", "THE SEA",
                  "a small house in the forest, watercolor", "three happy robots", "a cup of tea"]
    chosen = []
    for p in candidates:
        text = p.lower().strip()  # T5Embedder.text_preprocessing with use_text_preprocessing=False
        bt = tok([text], max_length=T2I_T, padding="max_length", truncation=True, return_attention_mask=True,
                 add_special_tokens=True, return_tensors="pt")
        with torch.no_grad():
            emb = model(input_ids=bt["input_ids"], attention_mask=bt["attention_mask"])["last_hidden_state"]
        mask = bt["attention_mask"]
        # sample_t2i.py's left padding
        new_mask = torch.flip(mask, dims=[-1])
        valid = int(mask[0].sum())
        new_emb = torch.cat([emb[0][valid:], emb[0][:valid]]).unsqueeze(0)
        c = new_emb * new_mask[:, :, None]
        trace = []
        with torch.no_grad():
            toks = generate(t2i, c, T2I_STEPS, cfg_scale=3.0, temperature=0.0, top_k=0, top_p=1.0,
                            sample_logits=False, emb_masks=new_mask, trace=trace)
        mg = min(margins(trace))
        print(f"  t2i {text!r}: {valid} valid of {T2I_T}, min argmax margin {mg:.4f}")
        if mg < args.min_margin:
            continue
        chosen.append(dict(prompt=p, text=text, ids=bt["input_ids"][0].tolist(), mask=mask[0].tolist(),
                           valid=valid, caption=c[0].numpy().astype("<f4"), tokens=toks[0].numpy(), margin=mg))
        if len(chosen) == 3:
            break
    if len(chosen) < 3 or not any(x["valid"] == T2I_T for x in chosen) or all(x["valid"] == T2I_T for x in chosen):
        sys.exit("the t2i candidates did not give 3 robust prompts with and without truncation")
    for k, x in enumerate(chosen):
        put(f"t2i_caption_{k}.npy", x["caption"],
            {"what": f"caption features fed to the t2i GPT for t2i prompt {k}: left-padded [8, 32] "
                     "(sample_t2i.py: mask flipped, valid rows rotated to the end, c = emb * mask)"})
    put("t2i_greedy.npy", np.stack([x["tokens"] for x in chosen]).astype("<i4"),
        {"what": "LlamaGen generate() on tests/fixtures/llamagen/pt/t2i_gpt.pt (= t2i_f32), temperature 0 (argmax), "
                 "top_k 0, top_p 1.0, cfg_scale 3.0, emb_masks = the flipped mask; one row per t2i prompt",
         "min_margins": [x["margin"] for x in chosen]})
    manifest["t2i"] = {
        "prompts": [{k: x[k] for k in ("prompt", "text", "ids", "mask", "valid", "margin")} for x in chosen],
        "notes": "text = prompt.lower().strip(), T5Embedder.text_preprocessing with use_text_preprocessing=False "
                 "(the default True runs clean_caption twice; for these plain ASCII prompts it gives the same text, checked "
                 "once with LlamaGen's own T5Embedder.text_preprocessing at commit ce98ec4, ftfy and beautifulsoup4 "
                 "installed). "
                 "Tokenized with max_length 8 (cls_token_num of the tiny t2i model), padding='max_length', "
                 "truncation, EOS; encoded in f32 with the attention mask; then sample_t2i.py's left padding. "
                 "The uncond half of CFG uses the model's uncond_embedding and the same (flipped) mask."}

    # ---- converted directories
    convert(hf, os.path.join(OUT, "f32"), "f32")
    convert(hf, os.path.join(OUT, "bf16"), "bf16")
    for d in ("f32", "bf16"):
        link_identical(os.path.join(hf, "spiece.model"), os.path.join(OUT, d, "spiece.model"))
    manifest["dirs"] = {"hf": "Hugging Face layout: T5EncoderModel.save_pretrained (config.json, model.safetensors) "
                              "and T5Tokenizer's spiece.model, with tokenizer_config.json and special_tokens_map.json "
                              "holding flan-t5-xl's keys; no tokenizer.json, so AutoTokenizer makes T5TokenizerFast "
                              "from spiece.model, as for the DeepFloyd T5 directories LlamaGen's T5Embedder downloads "
                              "(a tokenizer.json saved by save_pretrained gives the same ids on every prompt: checked "
                              "when the fixtures are made)",
                        "f32": "tools/convert_t5.py --dtype f32", "bf16": "tools/convert_t5.py --dtype bf16"}
    with open(os.path.join(gold, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False)
        f.write("\n")
    total = sum(os.path.getsize(os.path.join(dp, fn)) for dp, _, fns in os.walk(OUT) for fn in fns
                if not os.path.islink(os.path.join(dp, fn)))
    print(f"wrote {OUT} ({total / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
