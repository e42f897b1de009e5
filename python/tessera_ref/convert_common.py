"""Pieces shared by the checkpoint converters (tools/convert_*.py): the user-error type, shape
formatting, and the name -> shape table of the VQGAN / LDM convolutional decoder's blocks."""


class UserError(Exception):
    """A problem with the user's input: printed as one line "error: ..." with exit code 2."""


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
