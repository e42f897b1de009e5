"""tessera_ref: the project's PyTorch reference implementation of LlamaGen (written from
shared/notes/llamagen.md) plus small helpers (safetensors I/O) shared by tools and tests."""
