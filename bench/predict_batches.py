"""CPU time of each batch a loaded model predicts, one after another: what a stream (``greenadapt predict -``, the
spaCy component, a server) pays per batch once the model is open.

A tiny NER run on an expanded model with ``--extra-rows`` new words (a million: a real domain vocabulary's size) is
fine-tuned for one step, opened once with ``greenadapt.load``, and asked to tag the same batch of sentences
``--batches`` times. Before 34551cd every batch copied both tokenizers' backends (a serialization round trip of the
million-word T̂); the first batch still makes those copies, the later ones reuse them.

    python bench/predict_batches.py --extra-rows 1000000 --batches 4
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--sentences", type=int, default=16, help="sentences a batch")
    parser.add_argument("--runtime", default="torch", choices=["torch", "onnx"])
    args = parser.parse_args(argv)

    import greenadapt
    from finetune_helpers import build_tiny_expanded, write_ner_file

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        model = build_tiny_expanded(root / "model", extra_rows=args.extra_rows)
        train = write_ner_file(root / "train.tsv", 8, seed=1)
        greenadapt.finetune("ner", train, model=str(model), out=root / "run", max_steps=1, device="cpu", progress=False,
                            train_embeddings="none", entity_type="Disease")
        tagger = greenadapt.load(root / "run", runtime=args.runtime)
        texts = ["Patients with tachycardia were treated in the cardiology ward ."] * args.sentences
        for batch in range(args.batches):
            started = time.process_time()
            tagger.predict(texts)
            print(f"batch {batch + 1}: {time.process_time() - started:.3f} CPU-s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
