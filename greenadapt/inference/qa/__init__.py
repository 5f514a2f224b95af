"""Extractive question answering at inference: windows over whole documents, word-level pooling over both tokenizers, n-best spans."""
