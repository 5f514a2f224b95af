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


def _tokenizer_files(folder: Path) -> dict[str, Path]:
    """One tokenizer.json per kind of model family_of decides on, as the tokenizers library writes them."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    made = {
        "wordpiece": (models.WordPiece(vocab={"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"), pre_tokenizers.BertPreTokenizer()),
        "byte-level bpe": (models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]), pre_tokenizers.ByteLevel()),
        "unigram": (models.Unigram([("<unk>", 0.0), ("\u2581a", -1.0)], unk_id=0), pre_tokenizers.Metaspace()),
        "whitespace bpe": (models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]), pre_tokenizers.Whitespace()),
        "word level": (models.WordLevel(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]"), pre_tokenizers.Whitespace()),
    }
    files = {}
    for name, (model, pre_tokenizer) in made.items():
        tokenizer = Tokenizer(model)
        tokenizer.pre_tokenizer = pre_tokenizer
        files[name] = folder / f"{name}.json"
        tokenizer.save(str(files[name]))
    return files


def _family_verdict(spec: dict) -> str:
    from greenadapt.families import family_of

    try:
        return type(family_of(spec)).__name__
    except ModelError as refused:
        return refused.message


def test_the_family_check_reads_a_tokenizer_json_up_to_the_models_type_and_decides_as_the_whole_file(tmp_path: Path) -> None:
    """A T̂ of a million words is a 25 MB tokenizer.json: the check before every load reads what family_of needs
    (the entries before the model, its type) and not the vocabulary, with the verdict of the whole file."""
    from greenadapt.artifacts.pretrained import tokenizer_json_head

    verdicts = set()
    for name, path in _tokenizer_files(tmp_path).items():
        text = path.read_text(encoding="utf-8")
        whole = json.loads(text)
        head = tokenizer_json_head(text)
        assert head is not None, name
        assert head["model"] == {"type": whole["model"]["type"]} and head["pre_tokenizer"] == whole["pre_tokenizer"], name
        assert _family_verdict(head) == _family_verdict(whole), name
        verdicts.add(_family_verdict(whole))
        # the vocabulary is not decoded: a file broken inside it still has its head (the load itself then reports it)
        broken = text[: text.index('"vocab"')] + '"vocab": {"a": nonsense'
        assert tokenizer_json_head(broken) == head, name
    assert len(verdicts) == 5  # three families, two refusals: each kind was told apart


def test_a_tokenizer_json_laid_out_otherwise_is_decoded_whole_with_the_same_verdict(tmp_path: Path) -> None:
    from greenadapt.artifacts.pretrained import _check_family, tokenizer_json_head

    for name, path in _tokenizer_files(tmp_path).items():
        whole = json.loads(path.read_text(encoding="utf-8"))
        model_first = {"model": whole["model"], **{k: v for k, v in whole.items() if k != "model"}}
        type_last = {**whole, "model": {**{k: v for k, v in whole["model"].items() if k != "type"}, "type": whole["model"]["type"]}}
        for layout in (model_first, type_last):
            assert tokenizer_json_head(json.dumps(layout)) is None, name
            folder = tmp_path / name.replace(" ", "-") / str(id(layout))
            folder.mkdir(parents=True)
            (folder / "tokenizer.json").write_text(json.dumps(layout))
            if _family_verdict(whole).startswith("cannot adapt"):
                with pytest.raises(ModelError, match="cannot adapt"):
                    _check_family(folder)
            else:
                _check_family(folder)
    for not_a_description in ("[1, 2]", "{", "", '{[1]: 2, "model": {"type": "WordPiece"}}'):
        assert tokenizer_json_head(not_a_description) is None
    # nested deeper than Python's stack: one line, as any unreadable file (it raised RecursionError)
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "tokenizer.json").write_text('{"pre_tokenizer": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ModelError, match="unreadable tokenizer.json: nested"):
        _check_family(tmp_path / "deep")
