"""A second configuration of a stage lives beside the first: no --force, nothing another folder was built from replaced."""

from __future__ import annotations

import random
from pathlib import Path

import greenadapt
from greenadapt.artifacts.manifest import load_stage, manifest_identity

WORDS = ["the", "patients", "with", "tachycardia", "leukemia", "were", "in", "study", "of", "cells", "insulin", "kinase",
         "covid", "myocarditis", "ventilation", "and", "treated", "high", "rate", "heart"]


def _corpus(path: Path) -> Path:
    rng = random.Random(0)
    path.write_text("".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 20))) + ".\n" for _ in range(800)))
    return path


def _fingerprints(folder: Path) -> dict[str, str]:
    return {kind: load_stage(folder.parent / name, kind)["fingerprint"] for kind, name in
            (("w2v", "w2v"), ("align", "align"), ("expand", "expand"))}


def test_a_second_adapt_configuration_gets_its_own_stages_beside_the_first(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = str(_corpus(tmp_path / "notes.txt"))
    work = tmp_path / "work"
    first = greenadapt.adapt(corpus, model=str(tiny_bert), workdir=work, epochs=2, min_count=2, workers=1)
    before = _fingerprints(first.expand.path)

    second = greenadapt.adapt(corpus, model=str(tiny_bert), workdir=work, epochs=3, min_count=2, workers=1)
    names = {name: stage.path.name for name, stage in second.stages}
    assert all(not stage.skipped for _, stage in second.stages)
    key = names["w2v"].partition("+")[2]
    assert "epochs-3" in key and names == {"w2v": f"w2v+{key}", "align": f"align+{key}", "expand": f"expand+{key}"}
    assert all(stage.path.parent == first.expand.path.parent for _, stage in second.stages)
    # Each model was built from its own chain, and the first chain is as it was.
    assert load_stage(second.align.path, "align")["inputs"][0]["path"] == str(second.stages[0][1].path)
    assert _fingerprints(first.expand.path) == before

    # Running either again reuses it; so does naming the first configuration again.
    assert all(stage.skipped for _, stage in greenadapt.adapt(corpus, model=str(tiny_bert), workdir=work, epochs=3, min_count=2,
                                                              workers=1).stages)
    assert all(stage.skipped for _, stage in greenadapt.adapt(corpus, model=str(tiny_bert), workdir=work, epochs=2, min_count=2,
                                                              workers=1).stages)

    # A second expand of the first fit (the paper's every-word setting) goes beside the first expand.
    every = greenadapt.expand(align=first.align.path, min_count=1)
    assert every.path == first.expand.path.with_name("expand+min-count-1") and not every.skipped
    assert load_stage(every.path, "expand")["config"]["align"] == manifest_identity(first.align.path, load_stage(first.align.path, "align"))
    assert _fingerprints(first.expand.path) == before


def test_the_report_of_a_run_finds_its_adaptation_wherever_out_put_it(tmp_path: Path, tiny_bert: Path) -> None:
    """adapt --out models/green-bert, finetune from it, report the run folder alone: the adaptation stages and cost are there."""
    from finetune_helpers import write_ner_file

    from greenadapt.reporting.collection import collect
    from greenadapt.reporting.render import markdown

    corpus = str(_corpus(tmp_path / "notes.txt"))
    adapted = greenadapt.adapt(corpus, model=str(tiny_bert), workdir=tmp_path / "work", out=tmp_path / "models" / "green-bert",
                               epochs=1, min_count=2, workers=1)
    train = write_ner_file(tmp_path / "train.tsv", 20, seed=1)
    run = greenadapt.finetune("ner", train, test=train, model=adapted.expand.path, out=tmp_path / "runs" / "ner", device="cpu",
                              epochs=1, workdir=tmp_path / "work")
    data = collect([run.path])
    kinds_found = sorted(s["kind"] for s in data["stages"])
    assert kinds_found == ["align", "expand", "finetune", "w2v"], kinds_found
    assert {s["path"] for s in data["stages"] if s["kind"] != "finetune"} == {str(p.path.resolve()) for _, p in adapted.stages}
    [chain] = data["adaptation"]
    assert chain["complete"] and len(chain["stages"]) == 3 and chain["wall_seconds"] > 0  # the whole adaptation's cost
    assert "green-bert" in markdown(data)
