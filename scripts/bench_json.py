"""The `tessera bench --methods ... --json` object in a command's captured output (log lines
around it, other JSON objects before it): shared by scripts/gpu-check.sh's methods table and
scripts/round_cost.py."""
import json
import re


def last_methods(text):
    """The "methods" rows of the last JSON object in `text` that has them, else None."""
    for m in reversed(list(re.finditer(r"^\{", text, re.M))):
        try:
            d, _ = json.JSONDecoder().raw_decode(text[m.start():])
        except ValueError:
            continue
        if "methods" in d:
            return d["methods"]
    return None
