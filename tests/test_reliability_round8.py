"""The eighth reliability round (issue 92): the files greenadapt reads back from its own folders never hang it, crash
it or are trusted blindly: a FIFO where a checkpoint record or cache record should be, compare.json edited by hand,
a checkpoint's state with absurd numbers or a planted pickle, another model's graph under an export's cache key.

Each case is what a user would meet (the command line or the API, in process, on tiny models made once) and asserts
the one line, the exit code, and that nothing hangs: a read that could block runs in a thread with a deadline.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import cli_output
from interrupt_helpers import Crash, CrashAt
from conftest import build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_USAGE


def _within(seconds: float, action: Callable[[], Any]) -> Any:
    """``action()``'s result, or a failure if it has not returned after ``seconds`` (a hang, not a slow machine:
    every action here takes well under a second when it does not block)."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = action()
        except BaseException as error:  # noqa: BLE001  (handed to the test's thread)
            outcome["error"] = error

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds} s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")




def _one_line(code: int, err: str, expected: int | None = None) -> None:
    assert code != 0 and (expected is None or code == expected), (code, err)
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import greenadapt

    root = tmp_path_factory.mktemp("round8")
    found = {"plain": build_tiny_bert(root / "plain", head="base"), "expanded": build_tiny_expanded(root / "expanded"),
             "ner": write_ner_file(root / "ner.tsv", 16, seed=1)}
    for name, model in (("run", found["plain"]), ("expanded-run", found["expanded"])):
        greenadapt.finetune("ner", found["ner"], model=str(model), out=root / name, max_steps=2, seed=1, device="cpu", progress=False)
        found[name] = root / name
    return found


# -- 2. a FIFO where greenadapt reads back its own file ----------------------------------------------------------------


def test_a_fifo_as_a_checkpoint_record_is_skipped_with_a_warning_not_waited_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from greenadapt.training.checkpoint import latest_checkpoint

    candidate = tmp_path / "seed-1" / "ckpt-000004"
    candidate.mkdir(parents=True)
    os.mkfifo(candidate / "checkpoint.json")
    with caplog.at_level("WARNING", logger="greenadapt"):
        assert _within(10, lambda: latest_checkpoint(tmp_path / "seed-1")) is None
    assert any("a FIFO" in r.getMessage() and str(candidate) in r.getMessage() for r in caplog.records)


def test_a_fifo_as_the_onnx_cache_record_is_made_again_not_waited_on(made: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("onnxruntime")
    import greenadapt

    run = Path(shutil.copytree(made["run"], tmp_path / "run", ignore=shutil.ignore_patterns(".greenadapt-cache")))
    good = greenadapt.load(run, runtime="onnx").predict(["fever and tachycardia"])
    [record] = (run / ".greenadapt-cache" / "onnx").glob("*/manifest.json")
    record.unlink()
    os.mkfifo(record)
    again = _within(60, lambda: greenadapt.load(run, runtime="onnx").predict(["fever and tachycardia"]))
    assert again == good and record.is_file()  # made again: a regular record in its place


def test_a_fifo_as_a_manifest_or_compare_json_is_one_line(made: dict[str, Path], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.artifacts.files import NotARegularFile, read_own_text

    os.mkfifo(tmp_path / "compare.json")
    with pytest.raises(NotARegularFile, match="a FIFO"):
        _within(10, lambda: read_own_text(tmp_path / "compare.json"))
    code, _, err = _within(30, lambda: cli_output(["info", str(tmp_path)], monkeypatch, capsys))
    _one_line(code, err)


# -- 3. compare.json edited by hand --------------------------------------------------------------------------------------


def _compare_json() -> dict[str, Any]:
    """A compare.json as compare writes it (two variants, one pair), without its run folders: what info and the report read."""
    scores = {"1": {"mean": {"f1": 0.81}, "general": {"f1": 0.80}}, "2": {"mean": {"f1": 0.83}, "general": {"f1": 0.81}}}
    base = {"1": {"general": {"f1": 0.79}}, "2": {"general": {"f1": 0.80}}}
    return {"format": 1, "kind": "compare", "metric": "f1", "options": {"task": "ner", "comparator": None},
            "variants": [{"name": "base", "model": "m0", "headline_pool": "general", "scores": base,
                          "summary": {"general": {"mean": 0.795, "sd": 0.007, "n": 2}}, "finetune_cost": {"cpu_seconds": 10.0},
                          "adaptation_cost": {}},
                         {"name": "green", "model": "m1", "headline_pool": "mean", "scores": scores,
                          "summary": {"mean": {"mean": 0.82, "sd": 0.014, "n": 2}}, "finetune_cost": {"cpu_seconds": 12.0},
                          "adaptation_cost": {"cpu_seconds": 3.0}}],
            "pairs": [{"variant": "green", "baseline": "base", "metric": "f1", "seeds": [1, 2], "differences": [0.02, 0.03],
                       "mean": 0.025, "seed_interval95": [-0.04, 0.09], "bootstrap_interval95": [0.0, 0.05],
                       "significant95": False, "notes": [], "verdict": "green vs base: +2.50 F1 over 2 seeds; not significant",
                       "strata_table": []}],
            "share_of_comparator_gain": {}, "recommendation": "keep the base model", "seconds": 30.0}


EDITS: dict[str, Callable[[dict[str, Any]], None]] = {
    "recommendation a number": lambda d: d.update(recommendation=12345),
    "finished runs of numbers": lambda d: d.update(stopped={"why": "x", "not_started": 1, "finished_runs": [1, 2], "fix": "y"}),
    "a null variant name": lambda d: d["variants"][0].update(name=None),
    "a variant name of a number": lambda d: d["variants"][1].update(name=7),
    "a headline mean of text": lambda d: d["variants"][1]["summary"]["mean"].update(mean="0.8"),
    "a 400-digit headline mean": lambda d: d["variants"][1]["summary"]["mean"].update(mean=10**400),
    "a verdict of a number": lambda d: d["pairs"][0].update(verdict=3),
    "pairs not a list": lambda d: d.update(pairs={"a": 1}),
    "a difference of null": lambda d: d["pairs"][0].update(differences=[None]),
}


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_compare_json_is_one_line_naming_the_field_in_info_and_the_report(edit: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    document = _compare_json()
    EDITS[edit](document)
    folder = tmp_path / "cmp"
    folder.mkdir()
    (folder / "compare.json").write_text(json.dumps(document))
    for args in (["info", str(folder)], ["report", str(folder), "--html", str(tmp_path / "r.html")]):
        code, _, err = cli_output(args, monkeypatch, capsys)
        _one_line(code, err)
        assert "compare.json" in err and "field compare.json." in err, err


def test_an_intact_compare_json_reads_and_its_text_reaches_the_terminal_escaped(tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    document = _compare_json()
    document["recommendation"] = "use \x1b[2Jgreen\r\nnow"
    folder = tmp_path / "cmp"
    folder.mkdir()
    (folder / "compare.json").write_text(json.dumps(document))
    code, out, err = cli_output(["info", str(folder)], monkeypatch, capsys)
    assert code == 0, err
    assert "recommends  use \\x1b[2Jgreen\\x0d\\x0anow" in out and "\x1b" not in out and "\r" not in out
    assert "green vs base: +2.50 F1" in out
    code, markdown, err = cli_output(["report", str(folder)], monkeypatch, capsys)  # the report's text on the terminal
    assert code == 0 and "use \\x1b[2Jgreen" in markdown and "\x1b" not in markdown and "\r" not in markdown, markdown
    code, _, err = cli_output(["report", str(folder), "--html", str(tmp_path / "r.html")], monkeypatch, capsys)
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "green vs base" in page and "\x1b" not in page and "2Jgreen" in page


# -- 3. a checkpoint's state: absurd numbers, a planted pickle ---------------------------------------------------------------



@pytest.fixture(scope="module")
def interrupted(made: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A finetune killed after its checkpoint of step 2: the folder ``--resume`` reads, kept pristine for copying."""
    import greenadapt

    out = tmp_path_factory.mktemp("interrupted") / "run"
    options = {"task": "ner", "train": made["ner"], "model": str(made["plain"]), "out": out, "max_steps": 4, "save_every": 2,
               "seed": 1, "device": "cpu", "batch_size": 4, "entity_type": "Disease"}
    with pytest.raises(Crash):
        greenadapt.finetune(**options, progress=CrashAt(3))
    return {"options": options, "out": out}


def _resumable_copy(interrupted: dict[str, Any], tmp_path: Path) -> tuple[Path, Path]:
    from greenadapt.training.job import checkpoint_folder

    source = checkpoint_folder(interrupted["out"])
    target = checkpoint_folder(tmp_path / "run")
    shutil.copytree(source, target)
    [ckpt] = target.glob("seed-*/ckpt-*")
    return tmp_path / "run", ckpt


def _rewrite(ckpt: Path, name: str, data: bytes) -> None:
    (ckpt / name).write_bytes(data)
    manifest = json.loads((ckpt / "checkpoint.json").read_text())
    manifest["files"][name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (ckpt / "checkpoint.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize("field", ["seconds", "epoch", "step"])
def test_a_checkpoint_position_of_400_digits_is_one_line(field: str, interrupted: dict[str, Any], tmp_path: Path) -> None:
    import greenadapt
    from greenadapt.errors import StageError

    out, ckpt = _resumable_copy(interrupted, tmp_path)
    state = json.loads((ckpt / "state.json").read_text())
    state["position"][field] = 10**400
    _rewrite(ckpt, "state.json", json.dumps(state).encode())
    with pytest.raises(StageError) as refused:
        greenadapt.finetune(**{**interrupted["options"], "out": out}, resume=True, progress=False)
    line = refused.value.one_line()
    assert "unreadable checkpoint" in line and "position" in line and len(line) < 400 and "\n" not in line


def test_a_pickle_planted_as_the_optimizer_state_is_refused_in_one_line_and_never_runs(interrupted: dict[str, Any], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pickle

    out, ckpt = _resumable_copy(interrupted, tmp_path)
    planted = tmp_path / "planted"

    class Payload:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.mkdir, (str(planted),))

    _rewrite(ckpt, "optimizer.pt", pickle.dumps(Payload()))
    args = ["finetune", "--task", "ner", "--train", str(interrupted["options"]["train"]), "--model", interrupted["options"]["model"],
            "--out", str(out), "--max-steps", "4", "--save-every", "2", "--seed", "1", "--device", "cpu", "--batch-size", "4", "--resume",
            "--entity-type", "Disease", "--quiet"]
    code, _, err = cli_output(args, monkeypatch, capsys)
    _one_line(code, err)
    assert "holds objects other than tensors" in err and "weights_only" not in err and not planted.exists()


@pytest.mark.parametrize("content", ["the same bytes", "other bytes"])
def test_a_data_file_replaced_by_a_link_resumes_when_its_bytes_are_the_same_else_names_it(content: str, made: dict[str, Path],
                                                                                         tmp_path: Path) -> None:
    import greenadapt
    from greenadapt.errors import StageError

    train = tmp_path / "train.tsv"
    shutil.copyfile(made["ner"], train)
    options = {"task": "ner", "train": train, "model": str(made["plain"]), "out": tmp_path / "run", "max_steps": 4, "save_every": 2,
               "seed": 1, "device": "cpu", "batch_size": 4, "entity_type": "Disease"}
    with pytest.raises(Crash):
        greenadapt.finetune(**options, progress=CrashAt(3))
    elsewhere = tmp_path / "data" / "train.tsv"
    elsewhere.parent.mkdir()
    shutil.copyfile(made["ner"], elsewhere)
    if content == "other bytes":
        elsewhere.write_text(elsewhere.read_text().replace("\tB", "\tO", 1))
    train.unlink()
    train.symlink_to(elsewhere)
    if content == "the same bytes":
        assert greenadapt.finetune(**options, resume=True, progress=False).path == tmp_path / "run"
        return
    with pytest.raises(StageError) as refused:
        greenadapt.finetune(**options, resume=True, progress=False)
    line = refused.value.one_line()
    assert f"{train} is now read from {elsewhere}, and its content differs" in line, line


# -- 3. another model's graph under an export's cache key ------------------------------------------------------------------


def test_another_models_graph_under_the_cache_key_with_its_record_rewritten_is_never_served(made: dict[str, Path], tmp_path: Path,
                                                                                           caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("onnxruntime")
    import greenadapt

    run = Path(shutil.copytree(made["run"], tmp_path / "run", ignore=shutil.ignore_patterns(".greenadapt-cache")))
    other = Path(shutil.copytree(made["expanded-run"], tmp_path / "other", ignore=shutil.ignore_patterns(".greenadapt-cache")))
    good = greenadapt.load(run, runtime="onnx").predict(["fever and tachycardia"])
    greenadapt.load(other, runtime="onnx")
    [model] = (run / ".greenadapt-cache" / "onnx").glob("*/model.onnx")
    [foreign] = (other / ".greenadapt-cache" / "onnx").glob("*/model.onnx")
    model.write_bytes(foreign.read_bytes())
    from greenadapt.artifacts.manifest import sealed

    record = json.loads((model.parent / "manifest.json").read_text())
    record["files"]["model.onnx"] = {"size": model.stat().st_size, "sha256": hashlib.sha256(model.read_bytes()).hexdigest()}
    (model.parent / "manifest.json").write_text(json.dumps(sealed(record)))  # the manifest vouches for it, sealed anew
    with caplog.at_level("WARNING", logger="greenadapt"):
        again = greenadapt.load(run, runtime="onnx").predict(["fever and tachycardia"])
    assert again == good
    assert any("another model's graph" in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]


# -- 4. silent accepts ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [("3", "5"), ("5", "5")])
def test_the_old_and_new_spelling_of_w2v_min_count_together_are_refused(values: tuple[str, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the patients with fever\n" * 20)
    code, _, err = cli_output(["w2v", "--corpus", str(corpus), "--model", "bert-base-uncased", "--min-count", values[0],
                            "--w2v-min-count", values[1], "--out", str(tmp_path / "w2v")],
                        monkeypatch, capsys)
    _one_line(code, err, EXIT_USAGE)
    assert "--min-count" in err and "--w2v-min-count" in err and not (tmp_path / "w2v").exists()


def test_a_models_files_are_as_readable_as_the_umask_says(made: dict[str, Path], tmp_path: Path) -> None:
    """transformers writes model.safetensors 0600: a stage gives its files the mode a plain write would, so a colleague
    on a shared server (or a cron job under another account) can read the model the umask lets them read."""
    import stat

    import greenadapt

    previous = os.umask(0o027)
    try:
        greenadapt.finetune("ner", made["ner"], model=str(made["plain"]), out=tmp_path / "run", max_steps=1, seed=1, device="cpu",
                            progress=False, entity_type="Disease")
    finally:
        os.umask(previous)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [tmp_path / "run", *(tmp_path / "run").rglob("*")]}
    assert modes["run/model.safetensors"] == 0o640, modes
    assert all(mode in (0o640, 0o750) for mode in modes.values()), modes


def test_a_temporary_cut_while_it_is_removed_never_blocks_the_compares_rerun(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C to a compare's process group, then its workers' SIGTERM, could cut the removal of a run's temporary
    after its marker was gone: the rerun refused the compare folder ("holds files greenadapt did not write"), one run in
    a few of tests/test_reliability_round5_compare.py. The marker now goes last, so what a cut can leave is either still
    proven greenadapt's or an empty folder of a temporary's name, which compare passes over (a user's folder of that name
    with anything in it is still refused, and an empty one is still not taken for greenadapt's)."""
    import shutil as real_shutil

    from greenadapt.artifacts import stage
    from greenadapt.artifacts.stage import TEMPORARY_MARKER, empty_temporary, remove_temporary, written_by_greenadapt
    from greenadapt.comparison.folders import check_compare_folder

    real_rmtree = real_shutil.rmtree
    cmp = tmp_path / "cmp"
    tmp = cmp / "green" / ".seed-1.tmp-4782-f49cb8e3"
    (tmp / "predictions").mkdir(parents=True)
    (tmp / TEMPORARY_MARKER).write_text("greenadapt finetune output\n")
    (tmp / "model.safetensors").write_bytes(b"weights")

    def second_signal(path: object, *args: object, **kwargs: object) -> None:
        if Path(str(path)) == tmp:  # the whole folder: as rmtree may, its marker goes first, then the second signal
            (tmp / TEMPORARY_MARKER).unlink(missing_ok=True)
            raise KeyboardInterrupt
        real_rmtree(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(stage.shutil, "rmtree", second_signal)
    with pytest.raises(KeyboardInterrupt):
        remove_temporary(tmp)
    monkeypatch.setattr(stage.shutil, "rmtree", real_rmtree)
    assert written_by_greenadapt(tmp) or empty_temporary(tmp)  # never a folder of files without the marker
    check_compare_folder(cmp)  # the rerun's check passes over it
    (tmp / "notes.txt").write_text("a user's file")
    from greenadapt.errors import OutputExistsError

    with pytest.raises(OutputExistsError, match="did not write"):
        check_compare_folder(cmp)
    assert not written_by_greenadapt(tmp_path / "cmp")
