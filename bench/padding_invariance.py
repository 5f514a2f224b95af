"""Each sentence's logits alone against the same sentence inside one padded batch, per int8 runtime.

greenadapt's predict sorts sentences by length before it batches them, so a batch holds little padding and the
serving bench's invariance columns (the first 200 sentences alone against in their batch) can miss what padding
does. Here every runtime gets the same hard case: ``--count`` sentences of mixed lengths in one batch padded to the
longest, each view the run has, one thread (so no slicing). A runtime that gives a sentence an answer of its own
shows 0 here; one whose quantization or kernels look at the other rows does not.

    python bench/padding_invariance.py --run RUN --sentences sentences.txt --store STORE [--count 48]

Arms: greenadapt's ONNX int8 and fp32 graphs, and the anchors of bench/serving_anchors.py where installed (OpenVINO
at its default inference precision, bf16 where the CPU has it, and at f32).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def largest_gap(model: Callable[..., Any], tokenizer: Any, sentences: list[str]) -> float:
    """The largest logit difference over real tokens between each sentence alone and in the padded batch."""
    import numpy as np
    import torch

    def logits(encoded: dict[str, Any]) -> Any:
        with torch.inference_mode():
            return np.asarray(model(**{name: torch.from_numpy(array.astype(np.int64)) for name, array in encoded.items()}).logits)

    batch = logits(dict(tokenizer(sentences, truncation=True, max_length=128, padding=True, return_tensors="np")))
    worst = 0.0
    for row, sentence in enumerate(sentences):
        alone = logits(dict(tokenizer([sentence], truncation=True, max_length=128, return_tensors="np")))[0]
        worst = max(worst, float(np.abs(alone - batch[row, : len(alone)]).max()))
    return worst


def arms(run: Path, store: Path) -> dict[str, Callable[[], Any]]:
    """Each arm's name and how to build its model (built one at a time: each holds its weights)."""
    import serving_anchors

    from greenadapt.inference.labelling import load_finetuned_weights
    from greenadapt.inference.onnx_runtime import onnx_model
    from greenadapt.tasks import get_labelling_task

    def load() -> Any:
        return load_finetuned_weights(run, get_labelling_task("ner"))

    found: dict[str, Callable[[], Any]] = {
        "greenadapt ONNX fp32": lambda: onnx_model(run, load),
        "greenadapt ONNX int8": lambda: onnx_model(run, load, quantize="int8"),
    }
    if serving_anchors.installed("ctranslate2-int8"):
        found["CTranslate2 int8"] = lambda: serving_anchors.anchor_model("ctranslate2-int8", run, store)
    if serving_anchors.installed("openvino-int8"):
        found["OpenVINO + NNCF static int8"] = lambda: serving_anchors.anchor_model("openvino-int8", run, store)
        found["OpenVINO + NNCF static int8, f32 hint"] = lambda: serving_anchors.anchor_model(
            "openvino-int8", run, store, precision="f32")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a finetune output folder (NER)")
    parser.add_argument("--sentences", type=Path, required=True, help="one sentence a line; the first --count are used")
    parser.add_argument("--store", type=Path, required=True, help="where the anchors' conversions are kept")
    parser.add_argument("--count", type=int, default=48)
    args = parser.parse_args()
    import torch
    from transformers import AutoTokenizer

    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    torch.set_num_threads(1)
    sentences = [line.strip() for line in args.sentences.open(encoding="utf-8") if line.strip()][: args.count]
    views = {"domain view": args.run} | ({"general view": args.run / GENERAL_TOKENIZER_DIR}
                                         if (args.run / GENERAL_TOKENIZER_DIR).is_dir() else {})
    tokenizers = {name: AutoTokenizer.from_pretrained(str(path)) for name, path in views.items()}
    figures: dict[str, dict[str, float]] = {}
    print(f"| arm | {' | '.join(f'largest logit gap, {name}' for name in tokenizers)} |")
    print(f"|---|{'---:|' * len(tokenizers)}")
    for arm, build in arms(args.run.resolve(), args.store.resolve()).items():
        model = build()
        figures[arm] = {name: largest_gap(model, tokenizer, sentences) for name, tokenizer in tokenizers.items()}
        print(f"| {arm} | {' | '.join(f'{gap:.1e}' for gap in figures[arm].values())} |", flush=True)
        del model
    print(json.dumps({"sentences": len(sentences), "figures": figures}), file=sys.stderr)


if __name__ == "__main__":
    main()
