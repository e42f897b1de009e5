"""Pieces shared by the checkpoint converters (tools/convert_*.py): the user-error type, shape
formatting, and the name -> shape table of the VQGAN / LDM convolutional decoder's blocks."""


class UserError(Exception):
    """A problem with the user's input: printed as one line "error: ..." with exit code 2."""


def run_converter(convert, args):
    """Runs convert(args) as a converter's main: a UserError, or an OSError while writing the
    model directory (disk full, ...), is one line "error: ..." on stderr and exit code 2."""
    import sys
    try:
        convert(args)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # writing the model directory (reads raise UserError)
        print(f"error: cannot write {e.filename}: {e.strerror}" if e.filename else f"error: {e}",
              file=sys.stderr)
        return 2
    return 0


def shape_str(s):
    return "[" + ", ".join(str(int(x)) for x in s) + "]"


class DecoderTensors:
    """Adds the official tensor names and shapes of decoder blocks to the ordered dict `table`."""

    def __init__(self, table):
        self.table = table

    def conv(self, p, cin, cout, k):
        self.table[p + ".weight"] = [cout, cin, k, k]
        self.table[p + ".bias"] = [cout]

    def gn(self, p, c):
        self.table[p + ".weight"] = [c]
        self.table[p + ".bias"] = [c]

    def res(self, p, cin, cout):
        self.gn(p + ".norm1", cin)
        self.conv(p + ".conv1", cin, cout, 3)
        self.gn(p + ".norm2", cout)
        self.conv(p + ".conv2", cout, cout, 3)
        if cin != cout:
            self.conv(p + ".nin_shortcut", cin, cout, 1)

    def attn(self, p, c):
        self.gn(p + ".norm", c)
        for s in ("q", "k", "v", "proj_out"):
            self.conv(p + "." + s, c, c, 1)
