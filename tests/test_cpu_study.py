"""The CPU study's bookkeeping (issue 82): the order of its units, what counts as done (the study's folder or the
repository's copy, so a lost machine loses at most the unit in progress), and the rule applied as written only once
every arm has 10 seeds on the four sets."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _module(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def study():  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(BENCH))
    return _module("cpu_study")


def test_the_decisive_arms_of_a_seed_come_first_on_both_sets_then_the_others(study) -> None:  # type: ignore[no-untyped-def]
    order = study.units()
    assert len(order) == 4 * 10 * 5 and len(set(order)) == len(order)
    assert order[:6] == [(s, 1, a) for s in ("NCBI-disease", "BC5CDR-disease") for a in ("base-both", "base-rdrop", "green-both")]
    assert order[6:10] == [(s, 1, a) for s in ("NCBI-disease", "BC5CDR-disease") for a in ("green-min20", "green-agree")]
    assert order[10][1] == 2  # then seed 2
    later = [i for i, (s, _, _) in enumerate(order) if s in ("BC5CDR-chem", "BC2GM")]
    assert min(later) == 100  # the last two sets start once the first two have 10 seeds


def test_a_unit_is_done_in_the_study_folder_or_in_the_repository(study, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(study, "STUDY", tmp_path / "study")
    repo = tmp_path / "repo"
    assert study.done("NCBI-disease", 1, "base-both", repo) is None
    copied = study.unit_path(repo / study.RUNS_IN_REPO, "NCBI-disease", 1, "base-both")
    copied.parent.mkdir(parents=True)
    copied.write_text("{}")
    assert study.done("NCBI-disease", 1, "base-both", repo) == copied  # a fresh machine resumes from the repository's copy
    partial = study.unit_path(tmp_path / "study" / "results", "NCBI-disease", 1, "base-rdrop").with_suffix(".json.partial")
    partial.parent.mkdir(parents=True)
    partial.write_text("{")
    assert study.done("NCBI-disease", 1, "base-rdrop", repo) is None  # a cut unit is not done


def _compare(name: str, arms: dict[str, list[float]], seeds: list[int]) -> dict:
    return {"kind": "compare", "metric": "f1", "options": {"test": f"/d/ner/{name}/test.tsv", "against": "base", "task": "ner", "epochs": 3,
                                                          "batch_size": 32, "lr": 5e-05, "max_length": 128, "precision": "auto", "max_steps": None},
            "variants": [{"name": arm, "headline_pool": "mean", "scores": {str(s): {"mean": {"f1": f1[i]}} for i, s in enumerate(seeds)}}
                         for arm, f1 in arms.items()]}


def _table(tmp_path: Path, gains: dict[str, float], *, seeds: int = 10, sets: int = 4) -> str:
    import subprocess

    files = []
    for index, name in enumerate(("NCBI-disease", "BC5CDR-disease", "BC5CDR-chem", "BC2GM")[:sets]):
        for seed in range(1, seeds + 1):  # one file per arm and seed, as the study writes them
            noise = ((seed * 7 + index) % 5 - 2) * 0.001
            for arm, gain in gains.items():
                path = tmp_path / name / f"seed-{seed}" / f"{arm}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(_compare(name, {"base": [0.80 + noise], arm: [0.80 + noise + gain + 0.0003 * (seed % 3)]}, [seed])))
                files.append(str(path))
    done = subprocess.run([sys.executable, str(BENCH / "arm_table.py"), *files, "--rule", "--pair", "green-agree:green-both"],
                          capture_output=True, text=True, check=True)
    return done.stdout


def test_the_rule_decides_nothing_until_it_is_complete_and_then_as_written(tmp_path: Path) -> None:
    arms = {"base-both": 0.004, "base-rdrop": 0.013, "green-min20": 0.006, "green-both": 0.013, "green-agree": 0.010}
    partial = _table(tmp_path / "partial", arms, seeds=3)
    assert "Not applied" in partial and "decides nothing" in partial and "becomes the default" not in partial
    regularizer = _table(tmp_path / "full", arms)
    assert "| NCBI-disease | base-rdrop | 10 |" in regularizer
    assert "green-agree's mean is above green-both's on 0 of 4 sets: the candidate is green-both" in regularizer
    # green-both above green-min20 by 0.7 on every seed: (a) holds; but not above base-rdrop (level): (b) fails
    assert "**the default stays `--agreement 0`**" in regularizer and "**the gain is the regularizer's**" in regularizer
    rows = _table(tmp_path / "rows", {**arms, "base-rdrop": 0.002, "green-agree": 0.020})
    assert "the candidate is green-agree" in rows and "**green-agree becomes the default**" in rows
    assert "the gain is not shown to be the regularizer's" in rows


def test_a_checkpoint_older_than_its_inputs_new_times_is_dropped_the_others_kept(study, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The study's pinned greenadapt (ab95d39, older than the resume fix) refuses a checkpoint whose inputs' modification
    times changed (the same bytes copied anew), and the runner then leaves its unit for good: `start` removes such a
    checkpoint first, and only such a one."""
    import os

    monkeypatch.setattr(study, "STUDY", tmp_path / "study")
    monkeypatch.setattr(study, "DATA", tmp_path / "data")
    monkeypatch.setattr(study, "minilm", lambda: str(tmp_path / "minilm"))
    (tmp_path / "minilm").mkdir()
    (tmp_path / "minilm" / "model.safetensors").write_text("weights")
    for name in ("NCBI-disease", "BC5CDR-disease"):
        (tmp_path / "data" / "ner" / name).mkdir(parents=True)
        for file in ("train_dev.tsv", "test.tsv"):
            (tmp_path / "data" / "ner" / name / file).write_text("word\tO\n")
    checkpoints = {}
    for name, arm in (("NCBI-disease", "base-both"), ("BC5CDR-disease", "green-both")):
        checkpoint = tmp_path / "study" / "finetune" / name / arm / "seed-2.checkpoint" / "seed-2" / "ckpt-000500"
        checkpoint.mkdir(parents=True)
        (checkpoint / "model.safetensors").write_text("partial")
        os.utime(checkpoint / "model.safetensors", ns=(10**18, 10**18))
        checkpoints[name] = checkpoint.parent.parent
    for file in (tmp_path / "data" / "ner" / "BC5CDR-disease").iterdir():  # this set's inputs are older than its checkpoint
        os.utime(file, ns=(10**18 - 10**9, 10**18 - 10**9))
    os.utime(tmp_path / "minilm" / "model.safetensors", ns=(10**18 - 10**9, 10**18 - 10**9))
    assert study.drop_stale_checkpoints() == [checkpoints["NCBI-disease"]]  # its data files were written after it (now)
    assert not checkpoints["NCBI-disease"].exists() and checkpoints["BC5CDR-disease"].is_dir()
