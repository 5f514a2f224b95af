"""greenadapt info: what a folder is, from its manifest and config, for people (text) and scripts (--json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli_output, run_cli
from conftest import build_tiny_bert
from w2v_fixtures import linear_w2v

from greenadapt.adaptation.align import align_stage
from greenadapt.adaptation.expand import expand_stage
from greenadapt.artifacts.info import describe_folder, render
from greenadapt.artifacts.manifest import MANIFEST
from greenadapt.errors import StageError


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("info")
    model = build_tiny_bert(root / "model", head="base")
    w2v = linear_w2v(root / "w2v", model)[0]
    aligned = align_stage(w2v=w2v)
    expanded = expand_stage(align=aligned.path)
    return {"model": model, "w2v": Path(w2v), "align": aligned.path, "expand": expanded.path}


def test_each_stage_says_what_it_is_where_it_came_from_and_what_it_cost(chain: dict[str, Path]) -> None:
    align = describe_folder(chain["align"])
    manifest = json.loads((chain["align"] / MANIFEST).read_text())
    assert align["kind"] == "align" and align["manifest"] == "ok"
    assert align["figures"]["heldout_cosine"] == manifest["stats"]["heldout_cosine"]
    assert align["figures"]["n_new"] == manifest["stats"]["n_new"] > 0
    assert {"stage": "w2v", "path": str(chain["w2v"])}.items() <= next(p for p in align["parents"] if p.get("stage") == "w2v").items()
    assert align["cost"]["wall_seconds"] == manifest["cost"]["wall_seconds"]

    expand = describe_folder(chain["expand"])
    stats = json.loads((chain["expand"] / MANIFEST).read_text())["stats"]
    assert expand["kind"] == "expand" and expand["figures"]["vocab_size_after"] == stats["vocab_size_after"]
    assert any(p.get("stage") == "align" for p in expand["parents"])
    model = expand["model"]
    assert model["vocab_size"] == stats["vocab_size_after"] and len(model["tokenizers"]) == 2
    assert model["greenadapt"]["new_rows"] == {"first": stats["first_new_id"], "count": stats["n_new"]}
    text = render(expand)
    assert "kind        expand" in text and f"{stats['n_new']:,} new rows" in text


def test_a_plain_model_folder_and_damaged_or_edited_manifests(chain: dict[str, Path], tmp_path: Path) -> None:
    plain = describe_folder(chain["model"])
    assert plain["kind"] is None and "not written by greenadapt" in plain["manifest"]
    assert plain["model"]["tokenizers"] == ["one (folder root)"]

    import shutil

    edited = tmp_path / "edited"
    shutil.copytree(chain["align"], edited)
    manifest = json.loads((edited / MANIFEST).read_text())
    manifest["stats"]["heldout_cosine"] = 0.99
    (edited / MANIFEST).write_text(json.dumps(manifest))
    assert "edited by hand" in describe_folder(edited)["manifest"]

    truncated = tmp_path / "truncated"
    shutil.copytree(chain["align"], truncated)
    (truncated / MANIFEST).write_text('{"kind": "al')
    assert "not valid JSON" in describe_folder(truncated)["manifest"]

    changed = tmp_path / "changed"
    shutil.copytree(chain["expand"], changed)
    assert describe_folder(changed, check_files=True)["files"] == "ok"
    (changed / "config.json").write_text((changed / "config.json").read_text().replace("vocab_size", "vocab_size ", 1))
    assert "config.json" in describe_folder(changed, check_files=True)["files"]

    with pytest.raises(StageError, match="no such folder"):
        describe_folder(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(StageError, match="neither a greenadapt output nor a model folder"):
        describe_folder(tmp_path / "empty")


def test_cli_json_and_one_line_errors(chain: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.cli import main

    monkeypatch.setattr("sys.argv", ["greenadapt", "info", str(chain["expand"]), "--json"])
    with pytest.raises(SystemExit) as done:
        main()
    assert not done.value.code
    assert json.loads(capsys.readouterr().out)["kind"] == "expand"
    code, err = run_cli(["info", str(tmp_path / "missing")], monkeypatch, capsys)
    assert code == 4 and err.strip().count("\n") == 0 and "no such folder" in err and "Traceback" not in err


@pytest.mark.parametrize("damage", ["flipped byte in model.safetensors", "appended vocab.txt"])
@pytest.mark.parametrize("as_json", [False, True])
def test_a_failed_check_is_a_non_zero_exit_and_says_so_in_the_json(damage: str, as_json: bool, chain: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.5: `info --check` printed the mismatch, then `manifest: ok` and exit 0."""
    import shutil

    from greenadapt.errors import EXIT_STAGE_CONFLICT

    folder = shutil.copytree(chain["expand"], tmp_path / "expand")
    out, _, code = _info_cli([str(folder), "--check", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(out)["check"] == {"ok": True, "problem": None}
    if damage.startswith("flipped"):
        weights = folder / "model.safetensors"
        data = bytearray(weights.read_bytes())
        data[len(data) // 2] ^= 0xFF
        weights.write_bytes(bytes(data))
        name = "model.safetensors"
    else:
        with open(folder / "vocab.txt", "a", encoding="utf-8") as handle:
            handle.write("extra\n")
        name = "vocab.txt"
    out, err, code = _info_cli([str(folder), "--check", *(["--json"] if as_json else [])], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    assert f"{folder}: --check failed:" in err and name in err and len(err.strip().splitlines()) == 1, err
    # The description is still printed (stdout), and says the check failed.
    if as_json:
        described = json.loads(out)
        assert described["check"]["ok"] is False and name in described["check"]["problem"]
    else:
        assert "CHECK FAILED" in out and name in out


def _info_cli(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[str, str, int]:
    import sys

    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", "info", *args])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    return captured.out, captured.err, int(info.value.code or 0)


def test_info_prints_no_none_for_any_folder_kind(chain: dict[str, Path], tmp_path: Path) -> None:
    """Issue 72: `info` of a second-view folder printed "second-view on None: None new rows from id None; predictions
    pooled: None". Every kind of folder greenadapt writes is described without a None."""
    import greenadapt
    from finetune_helpers import write_ner_file

    ner = write_ner_file(tmp_path / "ner.tsv", 12, seed=1)
    view = greenadapt.second_view(model=str(chain["model"]), drop=0.3, out=tmp_path / "view", progress=False)
    run = greenadapt.finetune("ner", ner, model=str(chain["expand"]), out=tmp_path / "run", max_steps=2, device="cpu", progress=False)
    view_run = greenadapt.finetune("ner", ner, model=str(view.path), out=tmp_path / "view-run", max_steps=2, device="cpu", progress=False)
    compared = greenadapt.compare("ner", ner, ner, {"base": str(chain["model"]), "view": str(view.path)}, out=tmp_path / "cmp", seeds=[1],
                                  max_steps=2, device="cpu", bootstrap=100, keep_going=True, progress=False)
    for folder in (chain["w2v"], chain["align"], chain["expand"], chain["model"], view.path, run.path, view_run.path, compared.path):
        shown = render(describe_folder(folder))
        assert "None" not in shown, (folder, shown)
    shown = render(describe_folder(view.path))
    assert "second view" in shown and "0.3 of its pieces dropped" in shown and "no new rows" in shown, shown


def test_info_and_report_are_python_functions_with_the_commands_declarations(chain: dict[str, Path], tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             capsys: pytest.CaptureFixture[str]) -> None:
    """Every command is also a typed function: ``greenadapt.info`` returns what ``info --json`` prints, and
    ``greenadapt.report`` what ``report --json`` prints (and writes its page), from one declaration each."""
    import inspect

    import greenadapt

    assert list(inspect.signature(greenadapt.info).parameters)[:2] == ["path", "check_files"]
    described = greenadapt.info(chain["align"], check_files=True)
    assert described == describe_folder(chain["align"], check_files=True) and described["check"]["ok"]
    code, shown, _ = cli_output(["info", str(chain["align"]), "--check", "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(shown) == json.loads(json.dumps(described, default=str))
    page = tmp_path / "r.html"
    data = greenadapt.report([chain["align"], chain["expand"]], html=page)
    assert [a["name"] for a in data["alignment"]] and page.read_text().startswith("<!DOCTYPE html>")
    code, shown, _ = cli_output(["report", str(chain["align"]), str(chain["expand"]), "--json"], monkeypatch, capsys)
    assert code == 0 and json.loads(shown)["alignment"] == json.loads(json.dumps(data["alignment"], default=str))
