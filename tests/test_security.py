"""Nothing from an input is ever executed: no pickle is loaded, no model code is imported.

Each malicious input would create a marker file if it were unpickled or
imported; every test asserts the marker never appears and the failure is a
clear, typed error. A source scan pins the safe calls (``torch.load`` with
``weights_only=True``, ``np.load`` with ``allow_pickle=False``, no
``trust_remote_code=True``) so a new call site cannot slip in unsafely.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import build_tiny_bert
from finetune_helpers import write_ner_file
from w2v_fixtures import linear_w2v

from greenadapt.artifacts.manifest import MANIFEST_CHECKSUM, manifest_checksum
from greenadapt.errors import GreenAdaptError, ModelError, StageError
from greenadapt.options import Run

PACKAGE = Path(__file__).resolve().parent.parent / "greenadapt"


class _Payload:
    """Unpickling this calls ``Path(marker).touch()``: the stand-in for arbitrary code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (Path(self.marker),))


@pytest.fixture
def pickled_model(tmp_path: Path) -> tuple[Path, Path]:
    """A tiny BERT folder whose only weights are a ``pytorch_model.bin`` carrying the payload."""
    folder = build_tiny_bert(tmp_path / "model", head="base")
    marker = tmp_path / "code-ran"
    from safetensors.torch import load_file

    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save({**state, "evil": _Payload(marker)}, folder / "pytorch_model.bin")
    return folder, marker


def test_pickle_in_pytorch_model_bin_is_never_run_by_our_reader(pickled_model: tuple[Path, Path]) -> None:
    from greenadapt.artifacts.model_weights import read_input_embeddings

    folder, marker = pickled_model
    with pytest.raises(ModelError, match="cannot load PyTorch weights safely") as info:
        read_input_embeddings(folder)
    assert "pytorch_model.bin" in str(info.value) and "safetensors" in str(info.value)
    assert not marker.exists()


def test_pickle_in_pytorch_model_bin_is_never_run_by_transformers(pickled_model: tuple[Path, Path]) -> None:
    """The fine-tuning path hands the folder to transformers' from_pretrained, which must refuse the pickle too."""
    from greenadapt.tasks import NerTask

    folder, marker = pickled_model
    with pytest.raises(Exception) as info:  # noqa: PT011 - transformers' own error type; what matters is below
        NerTask().load_model(folder, ["O", "B-X", "I-X"])
    assert "weights_only" in str(info.value) or "Unpickl" in type(info.value).__name__ + str(info.value)
    assert not marker.exists()


def test_pickle_in_pytorch_model_bin_via_the_align_command(pickled_model: tuple[Path, Path], tmp_path: Path, tiny_bert: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    """Through the command line: one line, exit 3, the file named, nothing run."""
    from greenadapt.cli import main

    folder, marker = pickled_model
    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert, noise=0.01)
    monkeypatch.setattr(sys, "argv", ["greenadapt", "align", "--w2v", str(w2v), "--model", str(folder),
                                      "--out", str(tmp_path / "align"), "--quiet"])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code == 3, err
    assert err.startswith(f"error: {folder / 'pytorch_model.bin'}: cannot load PyTorch weights safely"), err
    assert len(err.strip().splitlines()) == 1
    assert not marker.exists()


def _revouch(folder: Path, name: str) -> None:
    """Update the stage manifest's checksum of ``name``, as an attacker who can write the folder would."""
    manifest = json.loads((folder / "manifest.json").read_text())
    data = (folder / name).read_bytes()
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)  # the manifest's own checksum is no secret either
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_object_array_in_align_output_is_refused(tmp_path: Path, tiny_bert: Path) -> None:
    from greenadapt.adaptation.align import MAP_FILE, align_stage
    from greenadapt.adaptation.expand import expand_stage

    w2v, _ = linear_w2v(tmp_path / "w2v", tiny_bert, noise=0.01)
    aligned = align_stage(w2v=w2v, run=Run(out=tmp_path / "align")).path
    marker = tmp_path / "code-ran"
    np.save(aligned / MAP_FILE, np.array([_Payload(marker)], dtype=object), allow_pickle=True)
    _revouch(aligned, MAP_FILE)
    with pytest.raises(StageError, match="unreadable map.npy.*allow_pickle=False"):
        expand_stage(align=aligned, run=Run(out=tmp_path / "expanded"))
    assert not marker.exists()
    assert not (tmp_path / "expanded").exists()


def test_pickle_in_a_finetune_model_folder_via_the_command(pickled_model: tuple[Path, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.cli import main

    folder, marker = pickled_model
    train = write_ner_file(tmp_path / "train.tsv", 8, seed=1)
    monkeypatch.setattr(sys, "argv", ["greenadapt", "finetune", "--task", "ner", "--train", str(train), "--model", str(folder),
                                      "--out", str(tmp_path / "run"), "--max-steps", "1", "--device", "cpu", "--quiet"])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert info.value.code != 0
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not marker.exists()
    assert not (tmp_path / "run").exists()


# --------------------------------------------------------------------------
# trust_remote_code


@pytest.fixture
def remote_code_model(tmp_path: Path) -> tuple[Path, Path]:
    """A BERT folder whose config and tokenizer config point (auto_map) at a modeling file that writes a marker."""
    folder = build_tiny_bert(tmp_path / "model", head="base")
    marker = tmp_path / "code-ran"
    code = (f"from pathlib import Path\nPath({str(marker)!r}).touch()\nfrom transformers import BertModel as EvilModel, BertConfig as "
            f"EvilConfig\n")
    (folder / "modeling_evil.py").write_text(code)
    (folder / "configuration_evil.py").write_text(code)
    (folder / "tokenization_evil.py").write_text(code.replace("BertModel as EvilModel, BertConfig as EvilConfig",
                                                               "BertTokenizerFast as EvilTokenizer"))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig", "AutoModel": "modeling_evil.EvilModel",
                          "AutoModelForTokenClassification": "modeling_evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(config))
    tok_config = json.loads((folder / "tokenizer_config.json").read_text())
    tok_config["auto_map"] = {"AutoTokenizer": [None, "tokenization_evil.EvilTokenizer"]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config))
    return folder, marker


def test_remote_code_is_never_imported(remote_code_model: tuple[Path, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.artifacts.model_weights import _embeddings_via_transformers
    from greenadapt.artifacts.model_weights import read_input_embeddings
    from greenadapt.artifacts.pretrained import load_fast_tokenizer, resolve_model
    from greenadapt.tasks import NerTask

    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # noqa: SIM115 - no interactive "trust this code?" prompt either
    folder, marker = remote_code_model
    ref = resolve_model(str(folder))
    for attempt in (
        lambda: load_fast_tokenizer(ref.path),
        lambda: read_input_embeddings(ref.path),
        lambda: _embeddings_via_transformers(ref.path),  # the from_pretrained path of a folder without weights files
        lambda: NerTask().load_model(ref.path, ["O", "B-X"]),
    ):
        try:
            attempt()
        except (GreenAdaptError, ValueError, OSError):
            pass  # refusing is fine; running the code is not
        assert not marker.exists()


# --------------------------------------------------------------------------
# The source itself


def _calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def _name(call: ast.Call) -> str:
    return ast.unparse(call.func)


def test_every_load_in_the_package_is_safe() -> None:
    """torch.load only with weights_only=True, np.load only with allow_pickle=False, no pickle, no trust_remote_code=True."""
    problems = []
    loads = 0
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for call in _calls(tree):
            name = _name(call)
            keywords = {k.arg: k.value for k in call.keywords if k.arg}
            where = f"{path.relative_to(PACKAGE.parent)}:{call.lineno}"
            if name.endswith("torch.load") or name == "load" and "torch" in ast.unparse(call):
                loads += 1
                value = keywords.get("weights_only")
                if not (isinstance(value, ast.Constant) and value.value is True):
                    problems.append(f"{where}: {name} without weights_only=True")
            if name in ("np.load", "numpy.load"):
                loads += 1
                value = keywords.get("allow_pickle")
                if not (isinstance(value, ast.Constant) and value.value is False):
                    problems.append(f"{where}: {name} without allow_pickle=False")
            if name.startswith(("pickle.", "cPickle.", "dill.", "joblib.")) and name.split(".")[-1] in ("load", "loads"):
                problems.append(f"{where}: {name}")
            value = keywords.get("trust_remote_code")
            if value is not None and not (isinstance(value, ast.Constant) and value.value is False):
                problems.append(f"{where}: trust_remote_code={ast.unparse(value)} (only an explicit user option may turn it on)")
    assert loads >= 3  # the scan does see the package's loads
    assert not problems, "\n".join(problems)
