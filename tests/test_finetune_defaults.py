"""The default run folder: a second model, or a second method's model, on the same task never collides."""

from __future__ import annotations

import json
from pathlib import Path

from greenadapt.artifacts.pretrained import resolve_model
from greenadapt.options import Run
from greenadapt.runners.finetune.settings import FinetuneSettings, default_run_folder


def _expanded(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "manifest.json").write_text(json.dumps({"kind": "expand"}))
    return folder


def test_each_model_and_method_gets_its_own_default_folder(tmp_path: Path) -> None:
    train = tmp_path / "NCBI-disease" / "train.tsv"
    train.parent.mkdir()
    train.write_text("a\tO\n")
    work = tmp_path / "work"
    options, run = FinetuneSettings(task="ner", train=train), Run(workdir=work)
    models = {
        "lstsq": _expanded(work / "pubmed" / "all-MiniLM-L6-v2" / "expand"),
        "focus": _expanded(work / "pubmed" / "all-MiniLM-L6-v2" / "expand-focus"),
        "out": _expanded(tmp_path / "models" / "green-bert"),
        "other out": _expanded(tmp_path / "models" / "green-focus"),
    }
    folders = {name: default_run_folder(options, run, resolve_model(str(path))) for name, path in models.items()}
    assert folders["lstsq"] == work / "finetune" / "NCBI-disease-ner" / "all-MiniLM-L6-v2-green-pubmed"
    assert folders["focus"].name == "all-MiniLM-L6-v2-green-focus-pubmed"
    assert folders["out"].name == "green-bert" and folders["other out"].name == "green-focus"
    assert len(set(folders.values())) == len(folders)
    classify = FinetuneSettings(task="classify", train=train)
    assert default_run_folder(classify, run, resolve_model(str(models["lstsq"]))) != folders["lstsq"]  # the task is in the name
