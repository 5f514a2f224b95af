"""bench/reproduce_ner.py: the study's plan (dry run) and its subset files, without running anything heavy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "reproduce_ner.py"


def _plan(tmp_path: Path, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--workdir", str(tmp_path / "study"), "--model", str(tmp_path / "model"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return [line[len("$ greenadapt ") :] for line in done.stderr.splitlines() if line.startswith("$ greenadapt ")]


def test_the_plan_covers_every_set_variant_and_seed_then_reports(tmp_path: Path) -> None:
    ner = tmp_path / "ner"
    for name in ("A", "B"):
        (ner / name).mkdir(parents=True)
    plan = _plan(tmp_path, "--ner", str(ner), "--sets", "A,B", "--seeds", "1,2,3")
    commands = [line.split()[0] for line in plan]
    assert commands == ["adapt"] + ["align", "expand"] * 2 + ["finetune"] * (2 * 4 * 3) + ["report"]
    finetunes = [line for line in plan if line.startswith("finetune")]
    outs = {line.split("--out ")[1] for line in finetunes}
    assert len(outs) == 24  # one run folder per set, variant and seed: finished ones are skipped on a rerun
    assert all("--resume" in line and "--device auto" in line for line in finetunes)
    base = [line for line in finetunes if "/base/" in line]
    assert len(base) == 6 and all("--mix 0 " in line and str(tmp_path / "model") in line for line in base)
    green = [line for line in finetunes if "/green/" in line]
    assert all("--mix 0.5 " in line and "--pool mean" in line and "/expand " in line for line in green)
    assert any("--method identity" in line for line in plan) and any("--method random" in line for line in plan)


def test_subsets_are_written_once(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import reproduce_ner
    finally:
        sys.path.pop(0)
    source = tmp_path / "train.tsv"
    source.write_text("a\tO\nb\tB\n\nc\tO\n\n\nd\tI\n\ne\tO\n")
    first = reproduce_ner._head_sentences(source, tmp_path / "sub", "train", 2)
    assert first.read_text() == "a\tO\nb\tB\n\nc\tO\n\n"
    stamp = first.stat().st_mtime_ns
    source.write_text("changed\tO\n")
    again = reproduce_ner._head_sentences(source, tmp_path / "sub", "train", 2)
    assert again == first and again.stat().st_mtime_ns == stamp  # its identity feeds the stages' fingerprints
    assert reproduce_ner._head_sentences(source, tmp_path / "sub", "x", None) == source
