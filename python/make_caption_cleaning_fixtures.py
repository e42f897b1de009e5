#!/usr/bin/env python3
"""Goldens for tessera's TextPreprocessing::Clean: LlamaGen's caption cleaning on dirty captions.

LlamaGen's T5Embedder (language/t5.py, from PixArt/DeepFloyd IF) cleans every typed prompt with
clean_caption twice by default. `clean_caption` below applies the same steps in the same order
(the same regular expressions, ftfy.fix_text, html.unescape twice, BeautifulSoup(..,
'html.parser').text, urllib.parse.unquote_plus); with --reference it is checked against the
official function on every input (equality is asserted).

Environment (pins in python/caption_cleaning_requirements.txt):
    /usr/bin/python3 -m venv /tmp/cleanvenv
    /tmp/cleanvenv/bin/pip install -r python/caption_cleaning_requirements.txt
    git -C LlamaGen show HEAD:language/t5.py > /tmp/llamagen_t5.py   # optional check
    /tmp/cleanvenv/bin/python python/make_caption_cleaning_fixtures.py \
        --reference /tmp/llamagen_t5.py

Writes tests/fixtures/t5/golden/cleaned.json: [{"text", "once", "twice"}], the inputs being the
240 prompts of prompts.json and the dirty captions of DIRTY below.
"""
import argparse
import html
import importlib.util
import json
import re
import sys
import types
import urllib.parse
from pathlib import Path

import ftfy
from bs4 import BeautifulSoup

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parent / "tests" / "fixtures" / "t5" / "golden"

# Runs of these characters become one space (the reference's bad_punct_regex).
BAD_PUNCT = re.compile(r"[#®•©™&@·º½¾¿¡§~)(\]\[}{|\\/*]+")

URL_TAIL = r"[a-zA-Z0-9.\-]+[.](?:com|co|ru|net|org|edu|gov|it)[\w/-]*\b\/?(?!@)"

# (pattern, replacement) in the reference's order; None marks where the non-regex steps go.
BEFORE_HTML = [
    (r"<person>", "person"),
    (r"\b((?:https?:(?:\/{1,3}|[a-zA-Z0-9%])|" + URL_TAIL + "))", ""),
    (r"\b((?:www:(?:\/{1,3}|[a-zA-Z0-9%])|" + URL_TAIL + "))", ""),
]
AFTER_HTML = [
    (r"@[\w\d]+\b", ""),  # @nickname
    (r"[\u31c0-\u31ef]+", ""),  # CJK strokes
    (r"[\u31f0-\u31ff]+", ""),  # katakana phonetic extensions
    (r"[\u3200-\u32ff]+", ""),  # enclosed CJK letters and months
    (r"[\u3300-\u33ff]+", ""),  # CJK compatibility
    (r"[\u3400-\u4dbf]+", ""),  # CJK unified ideographs extension A
    (r"[\u4dc0-\u4dff]+", ""),  # Yijing hexagram symbols
    (r"[\u4e00-\u9fff]+", ""),  # CJK unified ideographs
    (r"[\u002D\u058A\u05BE\u1400\u1806\u2010-\u2015\u2E17\u2E1A\u2E3A\u2E3B\u2E40\u301C\u3030"
     r"\u30A0\uFE31\uFE32\uFE58\uFE63\uFF0D]+", "-"),  # every dash
    (r"[`´«»“”¨]", '"'),
    (r"[‘’]", "'"),
    (r"&quot;?", ""),
    (r"&amp", ""),
    (r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", " "),  # IP addresses
    (r"\d:\d\d\s+$", ""),  # article ids
    (r"\\n", " "),  # a literal backslash-n
    (r"#\d{1,3}\b", ""),
    (r"#\d{5,}\b", ""),
    (r"\b\d{6,}\b", ""),
    (r"[\S]+\.(?:png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4)", ""),  # file names
    (r"[\"\']{2,}", r'"'),
    (r"[\.]{2,}", r" "),
    (BAD_PUNCT, r" "),
    (r"\s+\.\s+", r" "),
]
AFTER_BASIC = [
    (r"\b[a-zA-Z]{1,3}\d{3,15}\b", ""),  # jc6640
    (r"\b[a-zA-Z]+\d+[a-zA-Z]+\b", ""),  # jc6640vc
    (r"\b\d+[a-zA-Z]+\d+\b", ""),  # 6640vc231
    (r"(worldwide\s+)?(free\s+)?shipping", ""),
    (r"(free\s)?download(\sfree)?", ""),
    (r"\bclick\b\s(?:for|on)\s\w+", ""),
    (r"\b(?:png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4)(\simage[s]?)?", ""),
    (r"\bpage\s+\d+\b", ""),
    (r"\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b", r" "),  # j2d1a2a
    (r"\b\d+\.?\d*[xх×]\d+\.?\d*\b", ""),  # sizes 3x4
    (r"\b\s+\:\s+", r": "),
    (r"(\D[,\./])\b", r"\1 "),
    (r"\s+", " "),
    (r"^[\"\']([\w\W]+)[\"\']$", r"\1"),
    (r"^[\'\_,\-\:;]", r""),
    (r"[\'\_,\-\:\-\+]$", r""),
    (r"^\.\S+$", ""),
]


def apply(rules, text):
    for pattern, repl in rules:
        text = re.sub(pattern, repl, text)
    return text


def clean_caption(caption):
    """One pass of LlamaGen's caption cleaning."""
    text = urllib.parse.unquote_plus(str(caption)).strip().lower()
    text = apply(BEFORE_HTML, text)
    text = BeautifulSoup(text, features="html.parser").text
    text = apply(AFTER_HTML, text)
    if len(re.findall(r"[-_]", text)) > 3:  # this-is-my-cute-cat
        text = re.sub(r"[-_]", " ", text)
    text = html.unescape(html.unescape(ftfy.fix_text(text))).strip()  # basic_clean
    return apply(AFTER_BASIC, text).strip()


# Captions as scraped alt texts come: every rule of clean_caption, and text it must leave alone.
DIRTY = [
    "Check out https://example.com/cats?id=3 for more cats",
    "http://foo.bar.org/path/to/page.html a red car",
    "visit www.shop.ru/item-42 today",
    "a dog at WWW.DOGS.NET",
    "email me: jane.doe@mail.com please",
    "photo by @johnsmith on the beach",
    "@user_123: sunset over the sea",
    "#sunset #beach #summer vibes",
    "issue #12 and #123 and #1234 and #123456",
    "order 1234567 shipped",
    "serial 123456 and 12345",
    "server at 192.168.0.1 rack",
    "version 1.2.3.4.5 released",
    "<b>bold</b> and <i>italic</i> text",
    "<p class=\"caption\">A cat on a mat</p>",
    "line<br/>break<br>twice",
    "Tom &amp; Jerry",
    "Tom &amp;amp; Jerry",
    "&quot;Hello&quot; said the cat",
    "&lt;b&gt;not bold&lt;/b&gt;",
    "caf&eacute; on the corner",
    "caf&#233; and &#x263a; smile",
    "price &pound;5 &euro;6 &copy; 2020",
    "&nbsp;spaced&nbsp;out&nbsp;",
    "unknown &foo; entity &bar",
    "a%20cat%20on%20a%20mat",
    "red+apple+on+a+table",
    "caf%C3%A9 au lait",
    "100%25 cotton",
    "broken %E2%82 euro",
    "%zz not hex",
    "一只猫 a cat 在屋顶上",
    "日本の桜 cherry blossoms",
    "㈱ company ㎡ square meters",
    "Кошка — на крыше",
    "«Война и мир» книга",
    "“Quoted” and ‘single’ quotes",
    "It’s a dog’s life",
    "`backtick´ and ¨diaeresis",
    "ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ １２３",
    "the ﬁrst ﬂower ﬀ ﬃ",
    "ĳssel river",
    "photo.jpg of a cat",
    "IMG_1234.JPEG sunset",
    "download the file report.pdf now",
    "a cat image.png",
    "free shipping on all orders",
    "Worldwide Free Shipping t-shirt",
    "free download wallpaper",
    "download free icons",
    "click for more details",
    "click on this link",
    "see page 12 for details",
    "Page 3 of the book",
    "poster 3x4 inches",
    "print 10.5x20 cm",
    "frame 30х40 size",
    "canvas 50×70",
    "model jc6640 black",
    "item jc6640vc red",
    "code 6640vc231 blue",
    "sku ab12cd34ef",
    "this-is-my-cute-cat",
    "this_is_my_cute_cat",
    "a-b-c",
    "well-known long-term up-to-date",
    '"a quoted caption"',
    "'single quoted caption'",
    "-leading dash",
    "trailing dash-",
    ",leading comma",
    "trailing plus+",
    ":colon start",
    "_underscore start",
    "wait... what...",
    "dots....everywhere",
    "***AUSVERKAUFT***",
    '"""AUSVERKAUFT"""',
    "''double single''",
    "a cat | dog | bird",
    "[tag] {brace} (paren)",
    "back\\slash and /slash/",
    "™ brand® name© ~tilde~ §5",
    "a . b . c",
    "title : subtitle",
    "one,two.three/four",
    "pi is 3.14 and 2,5",
    "article 1:23   ",
    "literal \\n newline",
    "real\nnewline here",
    "tabs\tand  spaces   ",
    "   leading and trailing spaces   ",
    "<person> walking a dog",
    "a <person> and a <PERSON>",
    "i <3 cats",
    "a < b and c > d",
    "<unclosed tag text",
    "<!-- comment -->visible",
    "<script>var x=1;</script>after",
    "<a href='http://x.com'>link text</a>",
    "MiXeD CaSe Caption",
    "ÀÉÎÕÜ accented CAPS",
    "straße STRASSE",
    "İstanbul",
    "ΟΔΥΣΣΕΥΣ Greek capitals",
    "Ǆungla",
    "emoji 🐱 cat 🚗 car",
    "price: $19.99!",
    "50% off!!!",
    "q&a session",
    "rock & roll",
    "c++ programming",
    "a\u00a0non-breaking\u00a0space",
    "zero\u200bwidth",
    "soft\u00adhyphen",
    "bom\ufeffinside",
    "control\x07char",
    "ansi \x1b[31mred\x1b[0m text",
    "crlf\r\nline",
    "line\u2028separator",
    "c1 \x93quoted\x94 text",
    "e\u0301 decomposed",
    "ＡＢＣ fullwidth caps",
    "ｶﾀｶﾅ halfwidth katakana",
    "ideographic\u3000space",
    "\u201ehigh low\u201f quotes",
    "\u2018\u201b reversed",
    "modifier\u02bcapostrophe",
    "em—dash en–dash ‒ figure",
    "hyphen\u2010minus \ufe63small",
    "",
    "   ",
    "...",
    ".hidden",
    ".hidden file",
    "@@@",
    "#",
    "12345678",
    "a1b2c3d4",
    "x",
    "The Quick Brown Fox",
    "a photo of a dog, high quality, 4k",
    "portrait of a woman, oil painting, by artist",
    "3d render of a robot",
    "a 1920s car",
    "covid-19 mask",
    "t-rex dinosaur",
    "abc123",
    "123abc",
    "Ｈｅｌｌｏ ＷＯＲＬＤ！",
    "amp&amp;amp",
    "&amp;quot;nested&amp;quot;",
    "&#39;apostrophe&#39;",
    "&#150; dash entity",
    "mojibake cafÃ© text",
    "ÐºÐ¾ÑˆÐºÐ° mojibake",
    "https://t.co/abc123",
    "see example.it/page and shop.co",
    "foo@bar.com",
    "ftp://files.example.org/x",
    "under_score_heavy_name_here",
    "multi---dash",
    "ok - fine - good - yes",
]


def reference_clean_caption(path):
    """The official T5Embedder.clean_caption, imported from LlamaGen's language/t5.py."""
    for name in ("torch", "transformers", "huggingface_hub"):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.T5EncoderModel = stub.AutoTokenizer = stub.hf_hub_download = None
            sys.modules[name] = stub
    spec = importlib.util.spec_from_file_location("llamagen_t5", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    embedder = module.T5Embedder
    owner = types.SimpleNamespace(bad_punct_regex=embedder.bad_punct_regex,
                                  basic_clean=embedder.basic_clean)
    return lambda text: embedder.clean_caption(owner, text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", help="LlamaGen's language/t5.py, to check against")
    ap.add_argument("--out", default=str(GOLDEN / "cleaned.json"))
    args = ap.parse_args()
    prompts = json.loads((GOLDEN / "prompts.json").read_text(encoding="utf-8"))
    inputs = list(dict.fromkeys(prompts + DIRTY))
    rows = []
    for text in inputs:
        once = clean_caption(text)
        rows.append({"text": text, "once": once, "twice": clean_caption(once)})
    if args.reference:
        official = reference_clean_caption(args.reference)
        for row in rows:
            assert official(row["text"]) == row["once"], row
            assert official(official(row["text"])) == row["twice"], row
        print(f"checked {len(rows)} inputs against {args.reference}")
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False, indent=0)
        f.write("\n")
    changed = sum(r["twice"] != r["text"].lower().strip() for r in rows)
    print(f"wrote {args.out}: {len(rows)} inputs ({len(prompts)} prompts), "
          f"{changed} where clean differs from lower().strip()")


if __name__ == "__main__":
    main()
