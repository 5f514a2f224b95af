"""CPU time of the family check that runs before every tokenizer load, on a T̂ of ``--extra-rows`` words, against
decoding the whole tokenizer.json (the check before this bench's commit), side by side in one run.

The check (:func:`greenadapt.artifacts.pretrained.tokenizer_json_head`) reads the entries before the model and the
model's type; the anchor, ``json.loads`` of the file, is what it did before. Both verdicts are compared, and the
whole load (``load_fast_tokenizer``: the check, then transformers' own load) is timed for the share.

    python bench/tokenizer_check.py --extra-rows 1000000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))


def _cpu(function: object) -> float:
    start = time.process_time()
    function()  # type: ignore[operator]
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from finetune_helpers import build_tiny_expanded

    from greenadapt.artifacts.pretrained import load_fast_tokenizer, tokenizer_json_head
    from greenadapt.families import family_of

    with tempfile.TemporaryDirectory() as scratch:
        model = build_tiny_expanded(Path(scratch) / "model", extra_rows=args.extra_rows)
        path = model / "tokenizer.json"
        size = path.stat().st_size
        whole, head, load = [], [], []
        for _ in range(args.rounds):  # alternating, so that a change in the machine's speed falls on both
            whole.append(_cpu(lambda: family_of(json.loads(path.read_text(encoding="utf-8")))))
            head.append(_cpu(lambda: family_of(tokenizer_json_head(path.read_text(encoding="utf-8")) or {})))
            load.append(_cpu(lambda: load_fast_tokenizer(model)))
        text = path.read_text(encoding="utf-8")
        same = type(family_of(json.loads(text))) is type(family_of(tokenizer_json_head(text) or {}))
    print(f"tokenizer.json of {args.extra_rows:,} added words: {size / 2**20:.1f} MiB; verdicts agree: {same}")
    print(f"whole decode (before): {statistics.median(whole):.3f} CPU-s (median of {args.rounds})")
    print(f"head only (now):       {statistics.median(head):.3f} CPU-s; "
          f"{statistics.median(whole) / statistics.median(head):.0f}x less")
    print(f"load_fast_tokenizer (now, check included): {statistics.median(load):.2f} CPU-s; "
          f"the check was {statistics.median(whole) / (statistics.median(load) - statistics.median(head) + statistics.median(whole)):.0%} "
          f"of a load before")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
