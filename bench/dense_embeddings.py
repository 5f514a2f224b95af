#!/usr/bin/env python3
"""``greenadapt`` with the word-embedding table trained by plain dense AdamW: the reference for the row-wise update.

``finetune`` trains the rows ``expand`` added with a lazy, row-wise AdamW (only the rows a batch
uses are touched; see docs/design.md). This runs the same command line with that switched off: the
whole table, original and added rows, is one ordinary parameter of the dense AdamW, exactly as a
plain transformers loop would train it (decay and moments of every row, every step). Used by
``bench/reproduce_ner.py --variants green,green-dense`` to show the row-wise update does not move F1::

    python bench/dense_embeddings.py finetune --task ner --model runs/green-minilm --train ... --out ...
"""

from __future__ import annotations

from typing import Any


def dense_install(model: Any, *, n_base: int, mode: str, capacity: int) -> None:
    """No split module: every row is a plain trainable parameter (``mode`` ``all``) or frozen."""
    if mode not in ("all", "none"):
        raise SystemExit(f"dense embeddings: --train-embeddings {mode} has no dense equivalent here (all or none)")
    model.get_input_embeddings().weight.requires_grad_(mode == "all")


if __name__ == "__main__":
    from greenadapt.modeling import embeddings

    embeddings.install = dense_install  # type: ignore[assignment]
    from greenadapt.cli import main

    main()
