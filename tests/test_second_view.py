"""A second view of a model's own vocabulary (issue 64, item 2): no corpus, no new rows, every tokenizer family.

Invariants: the second tokenizer never produces a dropped piece, keeps every other entry at its id, and cuts a text
as the model's own tokenizer does wherever no dropped piece was in its way; the general tokenizer and the weights
are the model's, byte for byte; finetune trains the folder on the mixture and scores every pooling mode.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from cli_helpers import run_cli
from conftest import build_tiny_bert
from family_models import FAMILIES, build_family_model, domain_text, general_text
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_USAGE


BPE = ("roberta", "modernbert")  # byte-level BPE; deberta's is Unigram


def _model(family: str, folder: Path) -> Path:
    return build_tiny_bert(folder, head="base") if family == "bert" else build_family_model(family, folder)


@pytest.mark.parametrize("family", ["bert", *FAMILIES])
def test_the_second_view_drops_only_the_drawn_pieces_and_keeps_every_id(family: str, tmp_path: Path) -> None:
    import greenadapt
    from transformers import AutoTokenizer

    model = _model(family, tmp_path / "model")
    outcome = greenadapt.second_view(model=str(model), drop=0.3, seed=3, out=tmp_path / "view", progress=False)
    view, general = AutoTokenizer.from_pretrained(outcome.path), AutoTokenizer.from_pretrained(outcome.path / "general-tokenizer")
    own = AutoTokenizer.from_pretrained(model)
    texts = general_text(60) + domain_text(60)
    dropped_any = False
    vocab = own.get_vocab()
    kept = {token: i for token, i in view.get_vocab().items() if token in vocab}
    assert all(vocab[token] == i for token, i in kept.items())  # every entry the view keeps has its id
    spec = json.loads((outcome.path / "tokenizer.json").read_text())["model"]
    if spec["type"] == "Unigram":  # the pieces stay, never chosen: scored below any log-probability
        dropped_ids = {i for i, (_, score) in enumerate(spec["vocab"]) if score <= -1e8}
    else:  # the entries are renamed to a name no text has
        dropped_ids = {i for token, i in vocab.items() if token not in kept}
    assert outcome.manifest["stats"]["pieces_dropped"] == len(dropped_ids) > 0
    for text in texts:
        assert general(text)["input_ids"] == own(text)["input_ids"]  # T_LM is the model's own
        ids = view(text)["input_ids"]
        assert not dropped_ids.intersection(ids)
        if set(own(text)["input_ids"]).isdisjoint(dropped_ids):
            # nothing dropped in its way: cut as the model cuts it (greedy longest match, Viterbi); BPE's merges also
            # build the words' pieces through intermediate ones, so a dropped intermediate may cut a word otherwise
            assert ids == own(text)["input_ids"] or family in BPE
        else:
            dropped_any = True
    assert dropped_any
    weights = sorted(model.glob("*.safetensors"))
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in weights] == \
        [hashlib.sha256((outcome.path / p.name).read_bytes()).hexdigest() for p in weights]
    # one seed, one view: the same draw again is up to date, another seed another draw
    again = greenadapt.second_view(model=str(model), drop=0.3, seed=3, out=tmp_path / "view", progress=False)
    assert again.skipped
    other = greenadapt.second_view(model=str(model), drop=0.3, seed=4, out=tmp_path / "view-4", progress=False)
    assert json.loads((other.path / "tokenizer.json").read_text()) != json.loads((outcome.path / "tokenizer.json").read_text())


def test_finetune_trains_the_second_view_on_the_mixture_and_scores_every_pool(tmp_path: Path) -> None:
    import greenadapt

    view = greenadapt.second_view(model=str(build_tiny_bert(tmp_path / "model", head="base")), drop=0.3, out=tmp_path / "view",
                                  progress=False)
    run = greenadapt.finetune("ner", write_ner_file(tmp_path / "train.tsv", 24, seed=1),
                              test=write_ner_file(tmp_path / "test.tsv", 12, seed=2),
                              model=str(view.path), out=tmp_path / "run", max_steps=4, device="cpu", progress=False)
    stats = run.manifest["stats"]
    assert stats["pool"] == "mean" and stats["mix"] == 0.5 and 0 < stats["training"]["42"]["domain_fraction"] < 1
    assert set(json.loads((tmp_path / "run" / "metrics.json").read_text())["per_seed"]["42"]["test"]) == {"mean", "general", "domain"}


def test_bad_second_view_requests_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    expanded, plain = build_tiny_expanded(tmp_path / "expanded"), build_tiny_bert(tmp_path / "m", head="base")
    capsys.readouterr()  # (the builders' own bars)
    code, err = run_cli(["second-view", "--model", str(expanded), "--out", str(tmp_path / "v")], monkeypatch, capsys)
    assert code == EXIT_USAGE and "already has two tokenizers" in err and len(err.strip().splitlines()) == 1, err
    code, err = run_cli(["second-view", "--model", str(plain), "--drop", "0.95", "--out", str(tmp_path / "v")], monkeypatch, capsys)
    assert code == EXIT_USAGE and "--drop" in err, err
    assert not (tmp_path / "v").exists()
