"""What an adapted or fine-tuned folder publishes: no path of the machine it was made on, metadata the Hub
accepts, and loading snippets that run as written (issue 37, point 6)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S, build_tiny_bert
from finetune_helpers import write_classify_file
from w2v_fixtures import linear_w2v, write_w2v_folder

from greenadapt.artifacts.pretrained import DEFAULT_MODEL_HUB_ID, DEFAULT_MODEL_NAME, ModelRef, hub_id
from greenadapt.options import Run

REPO = Path(__file__).resolve().parent.parent


def _python_blocks(card: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", card, flags=re.S)


def _run_in(folder: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True, timeout=HANG_S)


def _check_metadata(card_text: str) -> dict[str, object]:
    """The card's YAML as the Hub's own client reads it, held to the rules the Hub applies on upload."""
    from huggingface_hub import ModelCard
    from huggingface_hub.utils import validate_repo_id

    data = ModelCard(card_text).data.to_dict()
    if data.get("base_model") is not None:
        validate_repo_id(str(data["base_model"]))  # raises on a path or anything else that is not a Hub id
    assert data.get("library_name") == "transformers"
    assert data.get("pipeline_tag") in (None, "token-classification", "text-classification", "question-answering")
    assert isinstance(data.get("tags"), list)
    return data


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A user's own model and corpus under private absolute paths, adapted and fine-tuned."""
    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage
    from greenadapt.adaptation.vectors import read_counts, read_word2vec_binary
    from greenadapt import finetune

    home = tmp_path_factory.mktemp("home-of-a-user")
    model = build_tiny_bert(home / "my-models" / "lab-bert", head="base")
    corpus = home / "private" / "patient-notes.txt"
    corpus.parent.mkdir()
    corpus.write_text("tachycardia and cardiomyopathy\n")
    made, _ = linear_w2v(home / "made", model)
    words, vectors = read_word2vec_binary(made / "vectors.bin")
    counts = read_counts(made / "counts.tsv")
    w2v = write_w2v_folder(home / "work" / "w2v", model, words, vectors, [counts[w] for w in words],
                           inputs=[{"path": str(corpus), "size": corpus.stat().st_size}])
    expanded = expand_stage(align=align_stage(w2v=w2v).path, run=Run(out=home / "models" / "green")).path
    train = write_classify_file(home / "train.jsonl", 16, seed=1)
    run = home / "runs" / "tuned"
    finetune(**dict(task="classify", model=str(expanded), train=train, test=train, out=run, device="cpu",
                                 **dict(epochs=1, batch_size=4)))
    return {"home": home, "expanded": expanded, "run": run}


@pytest.mark.parametrize("which", ["expanded", "run"])
def test_no_published_file_names_a_path_of_this_machine(published: dict[str, Path], which: str) -> None:
    folder = published[which]
    for name in ("README.md", "config.json"):
        text = (folder / name).read_text(encoding="utf-8")
        assert str(published["home"]) not in text and "/private/" not in text and "/my-models/" not in text, name
    block = json.loads((folder / "config.json").read_text())["greenadapt"]
    assert block["corpus"] == ["patient-notes.txt"] and block["base_model"] == "lab-bert" and block["base_model_hub_id"] is None


@pytest.mark.parametrize("which", ["expanded", "run"])
def test_the_card_passes_the_hubs_metadata_rules_and_its_snippet_runs_as_written(published: dict[str, Path], which: str) -> None:
    card = (published[which] / "README.md").read_text(encoding="utf-8")
    data = _check_metadata(card)
    assert "base_model" not in data  # a model only on this disk: naming it would fail the Hub's check
    assert "PATH" not in card
    blocks = _python_blocks(card)
    assert blocks
    for code in blocks:
        done = _run_in(published[which], code + "\nprint('ran')\n")
        assert done.returncode == 0 and done.stdout.strip().endswith("ran"), done.stderr[-2000:]


def test_base_model_is_the_hub_id_the_model_came_from(tmp_path: Path) -> None:
    from greenadapt.artifacts.model_card import expanded_card

    local = build_tiny_bert(tmp_path / "mine", head="base")
    assert hub_id(ModelRef(DEFAULT_MODEL_NAME, local)) == DEFAULT_MODEL_HUB_ID  # the bundled MiniLM
    assert hub_id(ModelRef("dmis-lab/biobert-v1.1", local)) == "dmis-lab/biobert-v1.1"  # fetched from the Hub
    assert hub_id(ModelRef(str(local), local)) is None  # a user's folder
    config = json.loads((local / "config.json").read_text())
    config["greenadapt"] = {"base_model": "biobert-v1.1", "base_model_hub_id": "dmis-lab/biobert-v1.1"}
    (local / "config.json").write_text(json.dumps(config))
    assert hub_id(ModelRef(str(local), local)) == "dmis-lab/biobert-v1.1"  # an adapted folder names its origin
    config["greenadapt"] = {"base_model": DEFAULT_MODEL_NAME}  # adapted before the id was recorded
    (local / "config.json").write_text(json.dumps(config))
    assert hub_id(ModelRef(str(local), local)) == DEFAULT_MODEL_HUB_ID
    card = expanded_card(
        base_model="all-MiniLM-L6-v2", base_model_hub_id=DEFAULT_MODEL_HUB_ID, method={"name": "lstsq"},
        stats={"n_new": 3, "first_new_id": 10, "vocab_size_after": 13, "vocab_size_before": 10}, align_stats={},
        corpus=["/home/someone/corpus.txt", "https://example.org/abstracts.jsonl", "sample"], general_tokenizer="general-tokenizer",
        upstream_cost={},
    )
    assert _check_metadata(card)["base_model"] == DEFAULT_MODEL_HUB_ID
    assert "`corpus.txt`, `https://example.org/abstracts.jsonl`, `sample`" in card and "/home/someone" not in card
