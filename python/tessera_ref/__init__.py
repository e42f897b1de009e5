"""tessera_ref: the project's PyTorch reference implementation of LlamaGen (written from a
description of FoundationVision/LlamaGen) plus small helpers (safetensors I/O) shared by tools and
tests."""
