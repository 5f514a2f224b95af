"""--model resolution: local folders, the Hub (offline, from its cache), the bundled default."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from greenadapt.artifacts.pretrained import hidden_size, load_fast_tokenizer, resolve_model
from greenadapt.errors import ModelError


def _fake_hub_cache(cache: Path, repo_id: str, source: Path) -> Path:
    """Lay out ``source`` the way huggingface_hub caches a downloaded repo."""
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    shutil.copytree(source, snapshot)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


def test_local_folder(tiny_bert: Path) -> None:
    ref = resolve_model(str(tiny_bert))
    assert ref.path == tiny_bert.resolve()
    assert hidden_size(ref) == 32
    assert ref.slug == "model"
    assert ref.identity()["files_digest"] == resolve_model(str(tiny_bert)).identity()["files_digest"]


def test_hub_id_resolves_from_the_offline_cache(tiny_bert: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "hub"
    snapshot = _fake_hub_cache(cache, "acme/tiny-bert", tiny_bert)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(cache))
    ref = resolve_model("acme/tiny-bert")
    assert ref.path == snapshot
    assert ref.slug == "tiny-bert"
    tokenizer = load_fast_tokenizer(ref.path)
    assert tokenizer.tokenize("sleep") == ["sleep"]


def test_uncached_hub_id_offline_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="could not be fetched from the Hugging Face Hub") as info:
        resolve_model("acme/not-there")
    assert "\n" not in info.value.one_line()
    assert "pass a local model folder" in info.value.one_line()


def test_missing_local_path_and_non_model_folder(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="model folder not found"):
        resolve_model(str(tmp_path / "nope"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelError, match="no config.json"):
        resolve_model(str(tmp_path / "empty"))


def test_tokenizer_of_an_unsupported_family_is_rejected(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = tmp_path / "bpe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "roberta", "hidden_size": 8}))
    bpe = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2, "<unk>": 3}, merges=[("a", "b")], unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    bpe.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    with pytest.raises(ModelError, match="cannot adapt a BPE model without a byte-level pre-tokenizer"):
        load_fast_tokenizer(folder)
    # transformers would happily rebuild a WordPiece tokenizer here; the saved one decides
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer"}))
    (folder / "vocab.txt").write_text("[PAD]\n[UNK]\na\nb\n")
    with pytest.raises(ModelError, match="cannot adapt a BPE model"):
        load_fast_tokenizer(folder)


def test_default_model_is_the_bundled_minilm(minilm_path: Path) -> None:
    ref = resolve_model(None)
    assert ref.path == minilm_path
    assert ref.slug == "all-MiniLM-L6-v2"
    assert hidden_size(ref) == 384
