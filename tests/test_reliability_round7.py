"""The seventh reliability round (issue 81): ``--force`` never replaces another command's folder or what a command
reads, a cached ONNX export is verified before it is used, and what cannot be served is refused in one line.

Every case is run as a user would (the command line, in process) on tiny models; each asserts the one-line refusal
and that every file the user had is byte for byte as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import run_cli
from conftest import build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_RESOURCE, EXIT_STAGE_CONFLICT, EXIT_USAGE

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import greenadapt

    root = tmp_path_factory.mktemp("round7")
    made = {"root": root, "plain": build_tiny_bert(root / "plain", head="base"), "expanded": build_tiny_expanded(root / "expanded"),
            "ner": write_ner_file(root / "ner.tsv", 16, seed=1), "text": root / "in.txt"}
    made["text"].write_text("the patients with tachycardia\nfever and covid\n")
    for name, model in (("run", made["plain"]), ("other", made["plain"])):
        greenadapt.finetune("ner", made["ner"], model=str(model), out=root / name, max_steps=2, seed=1 if name == "run" else 2,
                            device="cpu", progress=False)
        made[name] = root / name
    return made


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink()}


def _one_line(code: int, err: str, expected: int) -> None:
    assert code == expected, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err


def _copy_run(data: dict[str, Path], tmp_path: Path, name: str = "run") -> Path:
    import shutil

    return Path(shutil.copytree(data[name], tmp_path / name, ignore=shutil.ignore_patterns(".greenadapt-cache")))


# -- 1. data loss -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["the run itself", "inside the run", "inside the run's cache"])
def test_export_never_writes_over_or_into_the_run_it_reads(data: dict[str, Path], tmp_path: Path, where: str,
                                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy_run(data, tmp_path)
    out = {"the run itself": run, "inside the run": run / "served", "inside the run's cache": run / ".greenadapt-cache" / "served"}[where]
    before = _tree(run)
    code, err = run_cli(["export", "--onnx", "-m", str(run), "--out", str(out), "--force", "--quantize", "fp32"], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "outside what this command reads" in err, err
    assert _tree(run) == before


def test_force_replaces_only_a_folder_the_same_command_wrote(data: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run, other = _copy_run(data, tmp_path), _copy_run(data, tmp_path, "other")
    before = _tree(other)
    # an export over another fine-tuned run, and a fine-tuning over an adapted model folder: refused, --force or not
    code, err = run_cli(["export", "--onnx", "-m", str(run), "--out", str(other), "--force", "--quantize", "fp32"], monkeypatch, capsys)
    _one_line(code, err, EXIT_STAGE_CONFLICT)
    assert "'finetune' folder, which this command (onnx-export) did not write" in err and "--force replaces only" in err, err
    assert _tree(other) == before
    import shutil

    expanded = Path(shutil.copytree(data["expanded"], tmp_path / "expanded"))
    kept = _tree(expanded)
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["plain"]), "--max-steps", "1",
                         "--device", "cpu", "--out", str(expanded), "--force"], monkeypatch, capsys)
    _one_line(code, err, EXIT_STAGE_CONFLICT)
    assert _tree(expanded) == kept
    # the same command's own output is still redone by --force
    served = tmp_path / "served"
    assert run_cli(["export", "--onnx", "-m", str(run), "--out", str(served), "--quantize", "fp32"], monkeypatch, capsys)[0] == 0
    assert run_cli(["export", "--onnx", "-m", str(run), "--out", str(served), "--quantize", "fp32", "--force"], monkeypatch, capsys)[0] == 0


def test_second_view_never_writes_inside_the_model_it_reads(data: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    model = Path(shutil.copytree(data["plain"], tmp_path / "plain"))
    before = _tree(model)
    code, err = run_cli(["second-view", "--model", str(model), "--out", str(model / "view"), "--force"], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "outside what this command reads" in err, err
    assert _tree(model) == before and not (model / "view").exists()


def test_compare_never_writes_inside_a_model_it_fine_tunes(data: dict[str, Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    model = Path(shutil.copytree(data["plain"], tmp_path / "plain"))
    before = _tree(model)
    code, err = run_cli(["compare", "--task", "ner", "--train", str(data["ner"]), "--test", str(data["ner"]), "--model", f"base={model}",
                         "--model", f"green={data['expanded']}", "--seeds", "1", "--max-steps", "1", "--device", "cpu",
                         "--out", str(model / "cmp")], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "outside what this command reads" in err, err
    assert _tree(model) == before and not (model / "cmp").exists()


def test_a_users_folder_at_the_caches_name_is_never_adopted(data: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy_run(data, tmp_path)
    mine = run / ".greenadapt-cache"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    code, err = run_cli(["predict", "-m", str(run), str(data["text"]), "--runtime", "onnx"], monkeypatch, capsys)
    _one_line(code, err, EXIT_RESOURCE)
    assert "never adopted" in err and ".greenadapt-cache" in err, err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    # and so a later --force of the run still refuses to replace a folder holding the user's file
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["plain"]), "--max-steps", "2",
                         "--device", "cpu", "--out", str(run), "--force"], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and (mine / "notes.txt").read_text() == "mine", err


# -- 2. a cached export is verified before it is used -----------------------------------------------------------------


def _cached(run: Path) -> Path:
    [model] = sorted((run / ".greenadapt-cache" / "onnx").glob("*/model.onnx"))
    return model


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated", "another graph", "a link to a text file"])
def test_a_damaged_or_replaced_export_is_made_again_and_said_once(data: dict[str, Path], tmp_path: Path, damage: str,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt

    run = _copy_run(data, tmp_path)
    good = greenadapt.load(run, runtime="onnx").predict(["fever and tachycardia"])
    model = _cached(run)
    wanted = model.read_bytes()
    if damage == "another graph":  # the int8 graph of the same run under the fp32 key: it loads, and answers otherwise
        greenadapt.load(run, runtime="onnx", quantize="int8")
        [int8] = [p for p in (run / ".greenadapt-cache" / "onnx").glob("*/model.onnx") if p != model]
        model.write_bytes(int8.read_bytes())
    elif damage == "a link to a text file":
        model.unlink()
        (tmp_path / "text.txt").write_text("not a graph")
        model.symlink_to(tmp_path / "text.txt")
    else:
        model.write_bytes({"garbage": b"\x00garbage" * 100, "empty": b"", "truncated": wanted[: len(wanted) // 2]}[damage])
    import logging

    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logging.getLogger("greenadapt").addHandler(handler)
    try:
        again = greenadapt.load(run, runtime="onnx").predict(["fever and tachycardia"])
    finally:
        logging.getLogger("greenadapt").removeHandler(handler)
    assert again == good
    assert sum("does not match what was written" in r for r in records) == 1, records
    assert not model.is_symlink() and model.read_bytes() == wanted
    if damage == "a link to a text file":
        assert (tmp_path / "text.txt").read_text() == "not a graph"


def test_the_cached_export_is_a_stage_folder_that_a_copy_keeps_and_a_stray_file_remakes(data: dict[str, Path], tmp_path: Path,
                                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """Issue 93, item 5: the ONNX cache's entries are made by StageRun (a manifest of kind onnx-export with each file's
    SHA-256, no options.json); a copied run folder keeps its cache (named by the weights, not the path); a file the
    manifest does not list makes the entry again, said once."""
    import shutil

    import greenadapt

    run = _copy_run(data, tmp_path)
    greenadapt.load(run, runtime="onnx")
    entry = _cached(run).parent
    manifest = json.loads((entry / "manifest.json").read_text())
    assert manifest["kind"] == "onnx-export" and manifest["config"]["quantize"] == "none" and manifest["source"] == str(run)
    assert "model.onnx" in manifest["files"] and not (entry / "options.json").exists()
    copy = Path(shutil.copytree(run, tmp_path / "copy"))
    with caplog.at_level("INFO", logger="greenadapt"):
        greenadapt.load(copy, runtime="onnx")
    assert any("ONNX model from the cache" in r.getMessage() for r in caplog.records)
    assert not any("exporting" in r.getMessage() for r in caplog.records)
    (entry / "stray.txt").write_text("not the cache's")
    caplog.clear()
    with caplog.at_level("WARNING", logger="greenadapt"):
        greenadapt.load(run, runtime="onnx")
    assert sum("does not match what was written" in r.getMessage() for r in caplog.records) == 1
    assert not (entry / "stray.txt").exists() and (entry / "manifest.json").is_file()


@pytest.mark.parametrize("target", ["a folder", "nothing"])
def test_a_link_at_an_exports_name_is_replaced_by_the_export_and_its_target_left_alone(data: dict[str, Path], tmp_path: Path,
                                                                                        target: str) -> None:
    import shutil

    import greenadapt
    from greenadapt.inference.onnx_runtime import cache_key

    run = _copy_run(data, tmp_path)
    greenadapt.load(run, runtime="onnx")
    entry = _cached(run).parent
    shutil.rmtree(entry)
    elsewhere = tmp_path / "elsewhere"
    if target == "a folder":
        elsewhere.mkdir()
        (elsewhere / "mine.txt").write_text("mine")
    entry.symlink_to(elsewhere)
    assert entry.name == cache_key(run, "none")
    greenadapt.load(run, runtime="onnx").predict(["fever"])
    assert not entry.is_symlink() and (entry / "model.onnx").is_file()
    if target == "a folder":
        assert sorted(p.name for p in elsewhere.iterdir()) == ["mine.txt"]
    else:
        assert not elsewhere.exists()  # nothing made where the link pointed


def test_a_damaged_export_in_a_cache_that_cannot_be_written_is_one_line(data: dict[str, Path], tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt
    from greenadapt.inference import onnx_runtime

    run = _copy_run(data, tmp_path)
    greenadapt.load(run, runtime="onnx")
    model = _cached(run)
    model.write_bytes(b"garbage")
    real_access = os.access
    monkeypatch.setattr(onnx_runtime.os, "access", lambda path, mode: Path(path).name != "onnx" and real_access(path, mode))
    code, err = run_cli(["predict", "-m", str(run), str(data["text"]), "--runtime", "onnx"], monkeypatch, capsys)
    _one_line(code, err, EXIT_RESOURCE)
    assert "does not match what was written" in err and "safe to delete" in err, err


@pytest.mark.parametrize("where", [".greenadapt-cache", ".greenadapt-cache/onnx", ".greenadapt-cache/CACHEDIR.TAG"])
def test_the_cache_never_writes_through_a_link_it_did_not_make(data: dict[str, Path], tmp_path: Path, where: str,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    run = _copy_run(data, tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mine.txt").write_text("mine")
    link = run / where
    link.parent.mkdir(parents=True, exist_ok=True)
    if where.endswith("CACHEDIR.TAG"):
        link.symlink_to(tmp_path / "nothing-here")  # dangling: writing the tag would create a file outside
    else:
        link.symlink_to(outside)
    code, err = run_cli(["predict", "-m", str(run), str(data["text"]), "--runtime", "onnx"], monkeypatch, capsys)
    _one_line(code, err, EXIT_RESOURCE)
    assert "symbolic link" in err, err
    assert sorted(p.name for p in outside.iterdir()) == ["mine.txt"] and not (tmp_path / "nothing-here").exists()


def test_the_users_cache_is_only_for_folders_that_cannot_be_written(data: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """A whole, valid export in $XDG_CACHE_HOME/greenadapt under the run's key (one that would pass every check) is not
    consulted for a writable run: the run's own cache is made."""
    import shutil

    import greenadapt
    from greenadapt.inference.onnx_runtime import cache_key

    donor = _copy_run(data, tmp_path / "donor")
    greenadapt.load(donor, runtime="onnx")
    run = _copy_run(data, tmp_path)
    assert cache_key(run, "none") == cache_key(donor, "none")  # the same weights: the same key
    xdg = tmp_path / "xdg"
    shutil.copytree(_cached(donor).parent, xdg / "greenadapt" / "onnx" / cache_key(run, "none"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    greenadapt.load(run, runtime="onnx").predict(["fever"])
    assert (run / ".greenadapt-cache" / "onnx" / cache_key(run, "none") / "model.onnx").is_file()


def test_a_relative_xdg_cache_home_is_ignored_as_the_spec_says(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from greenadapt.inference import onnx_runtime

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert onnx_runtime._user_cache() == tmp_path / ".cache" / "greenadapt"


def test_a_killed_exports_temporary_is_removed_by_the_next(data: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    import greenadapt
    from greenadapt.inference.onnx_runtime import cache_key

    run = _copy_run(data, tmp_path)
    onnx = run / ".greenadapt-cache" / "onnx"
    # a real process killed mid-export: its temporary has greenadapt's marker and the dead PID in its name
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    from greenadapt.artifacts.files import make_cache
    from greenadapt.artifacts.stage import TEMPORARY_MARKER

    make_cache(onnx.parent)
    key = cache_key(run, "none")
    left = onnx / f".{key}.tmp-{dead.pid}-0123abcd"
    (left / "fp32").mkdir(parents=True)
    (left / TEMPORARY_MARKER).write_text("greenadapt ONNX export\n")
    (left / "fp32" / "model.onnx").write_bytes(b"half")
    (onnx / f".{key}.lock").write_text("")
    greenadapt.load(run, runtime="onnx")
    assert not left.exists() and _cached(run).is_file()


def test_a_dangling_out_link_is_refused(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "served"
    out.symlink_to(tmp_path / "elsewhere")
    code, err = run_cli(["export", "--onnx", "-m", str(data["run"]), "--out", str(out), "--quantize", "fp32"], monkeypatch, capsys)
    _one_line(code, err, EXIT_STAGE_CONFLICT)
    assert "does not exist" in err and not (tmp_path / "elsewhere").exists(), err


# -- 3. what cannot be exported or served is refused, never half-served -------------------------------------------------


def test_a_gmap_run_is_not_exported_without_its_fusion(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.modeling.gmap import wiring

    run = _copy_run(data, tmp_path)
    monkeypatch.setattr(wiring, "is_gmap_folder", lambda folder: Path(folder).resolve() == run.resolve())
    code, err = run_cli(["export", "--onnx", "-m", str(run), "--out", str(tmp_path / "served")], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "does not export G-MAP" in err and not (tmp_path / "served").exists(), err


@pytest.mark.parametrize("device", ["cpu:junk", "cpu:", "cuda:0"])
def test_onnx_refuses_a_device_it_cannot_run_on(device: str, data: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["predict", "-m", str(data["run"]), str(data["text"]), "--runtime", "onnx", "--device", device],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert f"not --device {device}" in err, err


def test_onnx_says_a_precision_is_unused(data: dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    import greenadapt

    with caplog.at_level("WARNING"):
        greenadapt.load(data["run"], runtime="onnx", precision="bf16")
    assert any("--precision bf16 is not used with --runtime onnx" in r.getMessage() for r in caplog.records)


@pytest.fixture(scope="module")
def served(data: dict[str, Path]) -> dict[str, Path]:
    import greenadapt

    root = data["root"]
    greenadapt.export(data["run"], onnx=True, quantize="both", out=root / "served-both")
    greenadapt.export(data["run"], onnx=True, quantize="int8", out=root / "served-int8")
    greenadapt.export(data["run"], onnx=True, quantize="fp32", out=root / "served-fp32")
    return {"both": root / "served-both", "int8": root / "served-int8", "fp32": root / "served-fp32"}


def _serve(folder: Path | None, *flags: str, stdin: bytes = b"fever and covid\n", edit: dict[str, bytes] | None = None,
           tmp: Path | None = None) -> tuple[int, str, str]:
    import shutil
    import subprocess
    import sys

    if folder is not None and edit:
        assert tmp is not None
        folder = Path(shutil.copytree(folder, tmp / "edited"))
        for name, content in edit.items():
            (folder / name).unlink() if content is None else (folder / name).write_bytes(content)  # type: ignore[func-returns-value]
    script = (folder or tmp or Path(".")) / "serve_onnx.py"
    if folder is None:
        assert tmp is not None
        script = tmp / "serve_onnx.py"
    args = [sys.executable, str(script), *([str(folder)] if folder is not None else []), *flags]
    done = subprocess.run(args, input=stdin, capture_output=True, timeout=120, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.parametrize(("case", "code"), [("no arguments", 2), ("a missing folder", 3), ("--int8 on an fp32-only export", 2),
                                            ("a mistyped flag", 2), ("no labels.json", 3), ("a bad pooling.json", 3),
                                            ("input that is not UTF-8", 3)])
def test_serve_onnx_fails_in_one_line_of_its_own(case: str, code: int, served: dict[str, Path], tmp_path: Path) -> None:
    import shutil

    shutil.copyfile(served["both"] / "serve_onnx.py", tmp_path / "serve_onnx.py")
    runs = {
        "no arguments": lambda: _serve(None, tmp=tmp_path),
        "a missing folder": lambda: _missing(tmp_path),
        "--int8 on an fp32-only export": lambda: _serve(served["fp32"], "--int8"),
        "a mistyped flag": lambda: _serve(served["both"], "--in8"),
        "no labels.json": lambda: _serve(served["both"], edit={"labels.json": None}, tmp=tmp_path),  # type: ignore[dict-item]
        "a bad pooling.json": lambda: _serve(served["both"], edit={"pooling.json": b"{not json"}, tmp=tmp_path),
        "input that is not UTF-8": lambda: _serve(served["both"], stdin=b"fever\n\xff\xfe caf\xe9\n"),
    }
    returncode, stdout, stderr = runs[case]()
    assert returncode == code, (case, stderr)
    assert len(stderr.strip().splitlines()) == 1 and stderr.startswith("serve_onnx.py: ") and "Traceback" not in stderr, stderr
    if case == "input that is not UTF-8":
        assert "line 2" in stderr and len(stdout.splitlines()) == 1  # the lines before it were answered


def _missing(tmp_path: Path) -> tuple[int, str, str]:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(tmp_path / "serve_onnx.py"), str(tmp_path / "absent")], input=b"", capture_output=True,
                          timeout=120, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_serve_onnx_runs_the_one_graph_of_an_int8_only_export(served: dict[str, Path]) -> None:
    code, stdout, stderr = _serve(served["int8"])
    assert code == 0 and json.loads(stdout.splitlines()[0])["line"] == 1, stderr


# -- 4. a QA run that learned nothing is no verdict either --------------------------------------------------------------


def test_compare_of_qa_runs_that_learned_nothing_stops_and_is_no_verdict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    # a long context: an untrained model's span shares a word with the one-word answer by chance only
    filler = " ".join(["the study of cells in the"] * 12)
    context = f"{filler} patients with covid and myocarditis needed ventilation {filler} coronavirus"
    squad = squad_file(tmp_path / "squad.json", [{"paragraphs": [paragraph(context,
                                                                           (f"q{i}", "who needed ventilation ?",
                                                                            [("patients", context.index("patients"))]),
                                                                            (f"r{i}", "what virus ?",
                                                                             [("coronavirus", context.index("coronavirus"))]))]}
                                                 for i in range(4)])
    models = [f"green={build_tiny_expanded_qa(tmp_path / 'green')}",
              f"base={build_tiny_expanded_qa(tmp_path / 'base', new_words=(), seed=1)}"]
    args = ["compare", "--task", "qa", "--train", str(squad), "--test", str(squad), "--model", models[1], "--model", models[0],
            "--seeds", "1,2", "--max-steps", "1", "--lr", "1e-9", "--device", "cpu", "--bootstrap", "100", "--out", str(tmp_path / "cmp")]
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "compare stopped" in err and "answer F1" in err and "learned nothing" in err, err
    code, err = run_cli([*args, "--keep-going"], monkeypatch, capsys)
    assert code == 0, err
    (pair,) = json.loads((tmp_path / "cmp" / "compare.json").read_text())["pairs"]
    assert pair["not_a_verdict"] and "not a verdict" in pair["verdict"], pair["verdict"]


# -- 5. inputs that crashed, hung or passed ------------------------------------------------------------------------------

HUGE = "1" + "0" * 400


def _finetune(data: dict[str, Path], tmp_path: Path, *extra: str) -> list[str]:
    return ["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["plain"]), "--max-steps", "1",
            "--device", "cpu", "--out", str(tmp_path / "run"), *extra]


@pytest.mark.parametrize("config", [f'{{"epochs": {HUGE}}}', '{"epochs": 1' + "0" * 5001 + "}", f"epochs = {HUGE}\n", f'{{"lr": {HUGE}}}'])
def test_a_huge_number_in_a_config_file_is_one_line(config: str, data: dict[str, Path], tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / ("c.toml" if config.startswith("epochs =") else "c.json")
    path.write_text(config)
    code, err = run_cli([*_finetune(data, tmp_path), "--config", str(path)], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert not (tmp_path / "run").exists()


def test_huge_numbers_from_python_and_the_environment_are_one_line(data: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import greenadapt
    from greenadapt.errors import UsageError

    with pytest.raises(UsageError, match="^epochs must be at most"):
        greenadapt.finetune("ner", data["ner"], model=str(data["plain"]), epochs=10**400, out=tmp_path / "a", device="cpu")
    with pytest.raises(UsageError, match="^lr must be"):
        greenadapt.finetune("ner", data["ner"], model=str(data["plain"]), lr=10**400, out=tmp_path / "a", device="cpu")
    with pytest.raises(UsageError, match="force=1"):
        greenadapt.finetune("ner", data["ner"], model=str(data["plain"]), out=tmp_path / "a", device="cpu",
                            force=1)  # type: ignore[arg-type]
    code, err = run_cli(["predict", "-m", str(data["run"]), str(data["text"]), "--batch-size", HUGE], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    monkeypatch.setenv("GREENADAPT_WORKERS", HUGE)
    code, err = run_cli(_finetune(data, tmp_path), monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "GREENADAPT_WORKERS" in err, err


def test_a_config_that_is_not_a_regular_file_is_refused_not_waited_on(data: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    fifo = tmp_path / "c.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "greenadapt", *_finetune(data, tmp_path), "--config", str(fifo)],
                          capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert done.returncode == EXIT_USAGE and "not a regular file" in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.parametrize(("extra", "says"), [(["--label-smoothing", "1"], "less than or equal to 0.99"),
                                             (["--agreement", "1e308"], "less than or equal to 100")])
def test_finetune_bounds_weights_that_leave_nothing_to_learn(extra: list[str], says: str, data: dict[str, Path], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(_finetune(data, tmp_path, *extra), monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert says in err, err


def test_a_mix_that_both_views_would_ignore_is_refused(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    args = ["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["expanded"]), "--max-steps", "1", "--device",
            "cpu",
            "--out", str(tmp_path / "run")]
    code, err = run_cli([*args, "--both-views", "--mix", "0.3"], monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "--mix 0.3 does nothing with --both-views" in err and not (tmp_path / "run").exists(), err


@pytest.mark.parametrize(("extra", "says"), [(["--agreement", "green=1e308"], "a positive weight of at most"),
                                             (["--devices", ",,,"], "--devices")])
def test_compare_refuses_a_weight_or_devices_that_say_nothing(extra: list[str], says: str, data: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["compare", "--task", "ner", "--train", str(data["ner"]), "--test", str(data["ner"]), "--model",
                         f"base={data['plain']}",
                         "--model", f"green={data['expanded']}", "--seeds", "1", "--max-steps", "1", "--out", str(tmp_path / "cmp"),
                         *extra],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert says in err and not (tmp_path / "cmp").exists(), err


def test_an_xdg_cache_home_that_is_a_file_is_our_one_line(data: dict[str, Path], tmp_path: Path) -> None:
    import subprocess
    import sys

    (tmp_path / "xdg").write_text("a file")
    done = subprocess.run([sys.executable, "-m", "greenadapt", "predict", "-m", str(data["run"]), str(data["text"]), "--runtime", "onnx"],
                          capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")})
    assert done.returncode == EXIT_USAGE and done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert "XDG_CACHE_HOME" in done.stderr and "onnxruntime" not in done.stderr, done.stderr


def test_serve_onnx_batches_and_answers_a_live_pipe_when_it_pauses(served: dict[str, Path]) -> None:
    """serve_onnx.py reads lines in groups and runs their windows in batches (issue 85, item 5), but a live input that
    pauses is answered at once: the first line's answer arrives before the input ends."""
    import subprocess
    import sys

    import threading

    process = subprocess.Popen([sys.executable, str(served["both"] / "serve_onnx.py"), str(served["both"])], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    watchdog = threading.Timer(120, process.kill)  # a script that waits for the end of its input never answers: killed, and fails
    watchdog.start()
    try:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(b"fever and covid\n")
        process.stdin.flush()
        first = json.loads(process.stdout.readline())  # blocks until answered: the input is still open
        assert first["line"] == 1 and first["text"] == "fever and covid"
        process.stdin.write(b"the patients\n" * 300)  # more than one group of lines
        process.stdin.close()
        rest = [json.loads(line) for line in process.stdout.read().splitlines()]
        assert [r["line"] for r in rest] == list(range(2, 302))
    finally:
        watchdog.cancel()
        process.kill()
        process.wait(timeout=30)
