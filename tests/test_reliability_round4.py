"""The fourth reliability round (issue 54): what a hostile probe of main found, each item a test that failed before.

Data safety tests make their own links, pipes and device nodes inside the test's folder, never the system's.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import HANG_S
from cli_helpers import run_cli
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_BAD_INPUT, EXIT_RESOURCE, EXIT_STAGE_CONFLICT, EXIT_USAGE

REPO = Path(__file__).resolve().parent.parent
AS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny expanded model, a NER file and one finished fine-tuning of it."""
    from greenadapt.api import finetune

    root = tmp_path_factory.mktemp("round4")
    model = build_tiny_expanded(root / "model")
    train = write_ner_file(root / "train.tsv", 24, seed=1)
    finetune(task="ner", train=train, model=model, out=root / "run", max_steps=2, device="cpu")
    return {"root": root, "model": model, "train": train, "run": root / "run"}


# 1. a user's <out>.checkpoint/ folder


@pytest.mark.parametrize("save_every", [None, 1])
def test_a_users_checkpoint_named_folder_outlives_the_run(save_every: int | None, run: dict[str, Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    mine = tmp_path / "run.checkpoint"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    (mine / "seed-1").mkdir()
    (mine / "seed-1" / "more.txt").write_text("also mine")
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(run["train"]), "--model", str(run["model"]), "--out", str(out),
                         "--max-steps", "2", "--device", "cpu", *(["--save-every", str(save_every)] if save_every else [])],
                        monkeypatch, capsys)
    assert code == 0, err
    assert (mine / "notes.txt").read_text() == "precious"
    assert (mine / "seed-1" / "more.txt").read_text() == "also mine"
    assert sorted(p.name for p in mine.rglob("*")) == ["more.txt", "notes.txt", "seed-1"]  # greenadapt's checkpoints are gone


def test_discarding_checkpoints_removes_only_greenadapts_own(tmp_path: Path) -> None:
    from greenadapt.training.checkpoint import discard_checkpoints

    ours = tmp_path / "ours.checkpoint"
    (ours / "seed-1" / "ckpt-000002").mkdir(parents=True)
    (ours / "seed-1" / "ckpt-000002" / "model.safetensors").write_bytes(b"x")
    (ours / "ckpt-000001").mkdir()
    discard_checkpoints(ours)
    assert not ours.exists()  # nothing else was in it: removed whole

    mixed = tmp_path / "mixed.checkpoint"
    (mixed / "ckpt-000001").mkdir(parents=True)
    (mixed / "ckpt-notes").write_text("a file of the user's named like a checkpoint")
    (mixed / "seed-2").mkdir()
    (mixed / "seed-2" / "data.csv").write_text("1,2")
    discard_checkpoints(mixed)
    assert sorted(p.relative_to(mixed).as_posix() for p in mixed.rglob("*")) == ["ckpt-notes", "seed-2", "seed-2/data.csv"]


# 2. predict -o a link, a pipe, a device: written through, never replaced


def _predict(run: dict[str, Path], output: Path | str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
             *extra: str) -> tuple[int, str]:
    return run_cli(["predict", "--model", str(run["run"]), "--input", str(run["train"]), "--output", str(output), *extra],
                   monkeypatch, capsys)


def test_predict_writes_through_a_symlink_and_keeps_it(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "real.tsv"
    target.write_text("old\n")
    link = tmp_path / "link.tsv"
    link.symlink_to(target)
    code, err = _predict(run, link, monkeypatch, capsys, "--force")
    assert code == 0, err
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() != "old\n" and target.read_text().count("\n") > 24
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.tsv", "real.tsv"]  # no temporary left


def _release(fifo: Path, reader: threading.Thread) -> None:
    """End a reader still waiting on ``fifo`` (predict did not write into it): it reads end of file at once."""
    if reader.is_alive():
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader.join(timeout=HANG_S)  # only a broken predict (the pipe replaced under a blocked reader) gets here and waits
    assert not reader.is_alive(), "the reader never saw the predictions: the pipe was replaced"


def test_predict_writes_into_a_fifo_and_leaves_it_a_fifo(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as handle:
            received.append(handle.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code, err = _predict(run, fifo, monkeypatch, capsys, "--force")
    _release(fifo, reader)
    assert code == 0, err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received and received[0].decode().count("\n") > 24
    # and through a link to it, without --force: nothing is replaced, so nothing needs forcing
    link = tmp_path / "to-pipe"
    link.symlink_to(fifo)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    code, err = _predict(run, link, monkeypatch, capsys)
    _release(fifo, reader)
    assert code == 0, err
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert len(received) == 2 and received[1] == received[0]


@pytest.mark.skipif(not AS_ROOT, reason="making a device node needs root")
def test_predict_writes_to_a_device_and_a_full_one_is_exit_5(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    null = tmp_path / "null"
    os.mknod(null, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # what /dev/null is
    full = tmp_path / "full"
    os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))  # what /dev/full is: every write fails with ENOSPC
    code, err = _predict(run, null, monkeypatch, capsys, "--force")
    assert code == 0, err
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    code, err = _predict(run, full, monkeypatch, capsys, "--force")
    assert code == EXIT_RESOURCE, err
    assert "disk full" in err and len(err.strip().splitlines()) == 1, err
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]


def test_predict_to_a_link_to_its_own_stdout_reaches_the_pipe(run: dict[str, Path], tmp_path: Path) -> None:
    """``-o /proc/self/fd/1`` (what /dev/stdout is) in a shell pipeline: the predictions come through the pipe."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    done = subprocess.run(
        [sys.executable, "-m", "greenadapt", "predict", "--model", str(run["run"]), "--input", str(run["train"]),
         "--output", str(link), "--force", "-q"],
        capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "GREENADAPT_DEBUG": ""},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n") > 24 and "\tB" in done.stdout or "\tO" in done.stdout
    assert link.is_symlink() and os.readlink(link) == "/proc/self/fd/1"


def test_a_killed_predict_leaves_no_temporary_after_the_next_run(run: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """kill -9 while predict writes: its hidden temporary stays; the next write to the same file removes it."""
    out = tmp_path / "tagged.tsv"
    script = (
        "import os, sys\n"
        "from pathlib import Path\n"
        "from greenadapt.artifacts.files import atomic_writer\n"
        "with atomic_writer(Path(sys.argv[1])) as handle:\n"
        "    handle.write('half')\n"
        "    handle.flush()\n"
        "    print('writing', flush=True)\n"
        "    sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script, str(out)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "writing"
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".tagged.tsv.") and left[0].endswith(".tmp")
    # a second writer meanwhile leaves the live writer's temporary alone
    from greenadapt.artifacts.files import atomic_write_text

    atomic_write_text(tmp_path / "tagged.tsv", "other\n")
    assert left[0] in [p.name for p in tmp_path.iterdir()]
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=HANG_S)
    assert left[0] in [p.name for p in tmp_path.iterdir()]
    code, err = _predict(run, out, monkeypatch, capsys, "--force")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tagged.tsv"]


# 3. compare --out a user's folder: refused before any training


@pytest.mark.parametrize("mine", ["compare.json", "notes.txt", "base/seed-1/notes.txt", "green/seed-9"])
def test_compare_refuses_a_users_folder_before_training(mine: str, run: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cmp"
    path = out / mine
    path.parent.mkdir(parents=True)
    if mine.endswith("seed-9"):
        path.mkdir()
        (path / "data.csv").write_text("1,2")
    else:
        path.write_text('{"mine": true}')
    before = {p.relative_to(out).as_posix(): (p.read_bytes() if p.is_file() else b"") for p in out.rglob("*")}
    code, err = run_cli(["compare", "--task", "ner", "--train", str(run["train"]), "--test", str(run["train"]),
                         "--model", f"base={run['model']}", "--model", f"green={run['model']}", "--seeds", "1",
                         "--device", "cpu", "--epochs", "1", "--out", str(out), "--force"], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    assert "refusing" in err and len(err.strip().splitlines()) == 1, err
    after = {p.relative_to(out).as_posix(): (p.read_bytes() if p.is_file() else b"") for p in out.rglob("*")}
    assert after == before  # nothing trained, nothing written


def test_compare_reuses_its_own_folder(run: dict[str, Path], tmp_path: Path) -> None:
    from greenadapt.comparison.folders import check_compare_folder

    out = tmp_path / "cmp"
    (out / "base" / "seed-1").mkdir(parents=True)
    (out / "base" / "seed-1.log").write_text("log")
    (out / "base" / "seed-1.checkpoint").mkdir()
    (out / "compare.json").write_text(json.dumps({"kind": "compare", "format": 1}))
    import shutil

    shutil.copytree(run["run"], out / "base" / "seed-1", dirs_exist_ok=True)
    check_compare_folder(out)  # greenadapt's own: no error
    (out / "compare.json").write_text(json.dumps({"kind": "something else"}))
    with pytest.raises(Exception, match="not written by greenadapt compare"):
        check_compare_folder(out)


# 4. credentials never reach a folder name, a line on the screen or a log


@pytest.mark.parametrize("url,secrets", [
    ("http://bob:Hunter2SECRETpw@127.0.0.1:9/", ("Hunter2SECRETpw", "bob")),
    ("s3://AKIAEXAMPLEKEY:wJalr/XUtnFEMI/K7MDENG@bucket/", ("wJalr/XUtnFEMI/K7MDENG", "AKIAEXAMPLEKEY", "XUtnFEMI")),
    ("s3://AKIAEXAMPLEKEY:wJalr/XUtnFEMI/K7MDENG@bucket/data/corpus.txt", ("wJalr", "XUtnFEMI", "AKIAEXAMPLEKEY")),
])
def test_url_credentials_never_reach_a_folder_name_or_the_error_line(url: str, secrets: tuple[str, ...], tmp_path: Path,
                                                                      tiny_bert: Path) -> None:
    from greenadapt.artifacts.workspace import corpus_key
    from greenadapt.corpus.remote import redact_url

    key = corpus_key([url])
    assert not any(s in key for s in secrets), key
    redacted = redact_url(url)
    assert not any(s in redacted.public for s in secrets), redacted.public
    assert not any(s in redacted.scrub(f"failed to read {url}") for s in secrets)
    done = subprocess.run(
        [sys.executable, "-m", "greenadapt", "w2v", "--corpus", url, "--model", str(tiny_bert), "--workdir", str(tmp_path / "w"),
         "--w2v-min-count", "1", "-v"],
        capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "GREENADAPT_DEBUG": "", "AWS_ACCESS_KEY_ID": "",
                                                         "AWS_SECRET_ACCESS_KEY": "", "AWS_EC2_METADATA_DISABLED": "true"},
    )
    assert done.returncode != 0
    shown = done.stdout + done.stderr
    assert not any(s in shown for s in secrets), shown[-2000:]
    names = [p.name for p in (tmp_path / "w").rglob("*")] if (tmp_path / "w").exists() else []
    assert not any(s in name for name in names for s in secrets), names


# 5. side-by-side configurations each get their own folder


def test_models_with_the_same_folder_name_keep_their_own_stages(tmp_path: Path) -> None:
    from conftest import build_tiny_bert

    from greenadapt.api import adapt

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients with tachycardia rose after infection\n" * 50)
    made = {}
    for name, seed in (("a", 0), ("b", 1), ("c", 2)):
        model = build_tiny_bert(tmp_path / name / "bert", seed=seed)
        outcome = adapt([str(corpus)], model=str(model), workdir=tmp_path / "w", dim=8, min_count=1, min_count_new=1, epochs=1, workers=1)
        made[name] = outcome.expand.path
    assert len(set(made.values())) == 3, made
    for name, folder in made.items():  # each expanded model was fitted on its own base model
        recorded = json.loads((folder.parent / "w2v" / "manifest.json").read_text())["config"]["model"]["path"]
        assert Path(recorded).resolve() == (tmp_path / name / "bert").resolve()
    again = adapt([str(corpus)], model=str(tmp_path / "a" / "bert"), workdir=tmp_path / "w", dim=8, min_count=1, min_count_new=1,
                  epochs=1, workers=1)
    assert again.expand.path == made["a"] and again.expand.skipped


def test_each_context_layer_gets_its_own_w2v_folder(tmp_path: Path, tiny_bert: Path) -> None:
    from greenadapt.api import w2v

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients with tachycardia rose after infection\n" * 20)
    folders = [w2v([str(corpus)], model=str(tiny_bert), source="context", context_layer=layer, min_count=1,
                   workdir=tmp_path / "w").path for layer in (0, 1, 2)]
    assert len(set(folders)) == 3, folders
    assert w2v([str(corpus)], model=str(tiny_bert), source="context", context_layer=1, min_count=1, workdir=tmp_path / "w").skipped


# 6. a model whose weights would be silently replaced by random ones is refused


def _edited_model(source: Path, dest: Path, **config: object) -> Path:
    import shutil

    shutil.copytree(source, dest)
    data = json.loads((dest / "config.json").read_text())
    data.update(config)
    (dest / "config.json").write_text(json.dumps(data))
    return dest


def _module_prefixed(source: Path, dest: Path) -> Path:
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(source, dest)
    weights = load_file(str(dest / "model.safetensors"))
    save_file({f"module.{k}": v for k, v in weights.items()}, str(dest / "model.safetensors"), metadata={"format": "pt"})
    return dest


@pytest.mark.parametrize("broken", ["gpt2", "module-prefix", "hidden-0", "five-heads", "unparseable"])
@pytest.mark.parametrize("command", ["finetune", "adapt"])
def test_a_model_that_cannot_load_its_weights_is_refused_before_any_work(broken: str, command: str, run: dict[str, Path], tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch,
                                                                         capsys: pytest.CaptureFixture[str]) -> None:
    source = run["model"]
    model = {
        "gpt2": lambda: _edited_model(source, tmp_path / "m", model_type="gpt2"),
        "module-prefix": lambda: _module_prefixed(source, tmp_path / "m"),
        "hidden-0": lambda: _edited_model(source, tmp_path / "m", hidden_size=0),
        "five-heads": lambda: _edited_model(source, tmp_path / "m", num_attention_heads=5),
        "unparseable": lambda: _edited_model(source, tmp_path / "m"),
    }[broken]()
    if broken == "unparseable":
        (model / "config.json").write_text("{not json")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients with tachycardia rose after infection\n" * 20)
    args = {
        "finetune": ["finetune", "--task", "ner", "--train", str(run["train"]), "--model", str(model), "--max-steps", "1",
                     "--device", "cpu", "--out", str(tmp_path / "out")],
        "adapt": ["adapt", "-c", str(corpus), "-m", str(model), "--dim", "8", "--w2v-min-count", "1", "--epochs", "1",
                  "--workers", "1", "--workdir", str(tmp_path / "w")],
    }[command]
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert len(err.strip().splitlines()) == 1 and str(model) in err, err
    assert not (tmp_path / "out").exists() and not (tmp_path / "w").exists()  # nothing trained, nothing written


# 7. out-of-range numbers, deep JSON, a full disk: one line and the right exit code, never "internal error"


@pytest.mark.parametrize("args", [
    ["w2v", "--epochs", "99999999999999999999999"],
    ["w2v", "--seed", "-1"],
    ["w2v", "--seed", "4294967296"],
    ["align", "--method", "random", "--seed", "-5"],
    ["finetune", "--seed", "-1"],
    ["finetune", "--seeds", "1,4294967296"],
    ["finetune", "--lr", "nan"],
    ["finetune", "--weight-decay", "nan"],
    ["finetune", "--seeds", ""],
    ["finetune", "--seeds", "1,,2"],
    ["finetune", "--seeds", "1,2", "--seed", "3"],
    ["finetune", "--entity-type", "B-X"],
    ["pretrain", "--lr", "nan"],
    ["compare", "--seeds", "-1"],
    ["compare", "--comparator", "base"],
    ["w2v", "--source", "context", "--no-vectors"],
    ["w2v", "--source", "context", "--context-layer", "99"],
    ["predict", "--header", "maybe"],
    ["predict", "-m", "MODEL"],
])
def test_bad_options_get_one_line_and_exit_2_before_any_work(args: list[str], run: dict[str, Path], tmp_path: Path, tiny_bert: Path,
                                                               monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients\n" * 20)
    command, rest = args[0], [str(run["run"]) if a == "MODEL" else a for a in args[1:]]
    base = {
        "w2v": ["-c", str(corpus), "-m", str(tiny_bert), "--w2v-min-count", "1", "--workdir", str(tmp_path / "w")],
        "align": ["--w2v", str(tmp_path / "no-w2v-needed-before-the-seed-check")],
        "finetune": ["--task", "ner", "--train", str(run["train"]), "--model", str(run["model"]), "--max-steps", "1",
                     "--device", "cpu", "--out", str(tmp_path / "out")],
        "pretrain": ["-c", str(corpus), "-m", str(tiny_bert), "--max-steps", "1", "--device", "cpu", "--out", str(tmp_path / "out")],
        "compare": ["--task", "ner", "--train", str(run["train"]), "--test", str(run["train"]), "--model", f"base={run['model']}",
                    "--model", f"green={run['model']}", "--out", str(tmp_path / "out")],
        "predict": ["-m", str(run["run"]), "--input", str(run["train"])],
    }[command]
    code, err = run_cli([command, *base, *rest], monkeypatch, capsys)
    assert code == EXIT_USAGE, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert "internal error" not in err
    assert not (tmp_path / "out").exists() and not (tmp_path / "w").exists()


def test_json_nested_too_deeply_is_one_line(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    squad = tmp_path / "deep.json"
    squad.write_text(deep)
    from greenadapt.data.squad import read_squad

    with pytest.raises(Exception, match="nested too deeply") as info:
        read_squad(squad)
    assert getattr(info.value, "exit_code", None) == EXIT_BAD_INPUT
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run["run"], copy)
    (copy / "manifest.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    code, err = _predict({**run, "run": copy}, tmp_path / "p.tsv", monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "nested too deeply" in err and len(err.strip().splitlines()) == 1, err


def test_a_full_disk_while_saving_weights_is_exit_5(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    import errno

    import safetensors.torch

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    monkeypatch.setattr(safetensors.torch, "save_model", full)
    import transformers.modeling_utils

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full)
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(run["train"]), "--model", str(run["model"]), "--max-steps", "1",
                         "--device", "cpu", "--out", str(tmp_path / "out")], monkeypatch, capsys)
    assert code == EXIT_RESOURCE, err
    assert err.strip().splitlines()[-1].startswith("error: ") and "disk full" in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


# 8. what was accepted silently


def test_a_jsonl_corpus_whose_records_lack_the_text_field_is_refused(tmp_path: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    corpus = tmp_path / "mostly.jsonl"
    corpus.write_text(json.dumps({"text": "the heart rate of patients"}) + "\n"
                      + "".join(json.dumps({"title": f"x {i}"}) + "\n" for i in range(200)))
    code, err = run_cli(["w2v", "-c", str(corpus), "-m", str(tiny_bert), "--w2v-min-count", "1", "--workdir", str(tmp_path / "w")],
                        monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert "no 'text' key" in err and err.strip().splitlines()[-1].startswith("error: "), err


def test_predict_checks_a_run_whose_manifest_is_gone(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run["run"], copy)
    (copy / "manifest.json").unlink()
    code, err = _predict({**run, "run": copy}, tmp_path / "p.tsv", monkeypatch, capsys)
    assert code != 0 and "manifest.json is missing" in err, err
    assert not (tmp_path / "p.tsv").exists()


def test_report_refuses_figures_edited_after_the_run(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run["run"], copy)
    code, err = run_cli(["report", str(copy)], monkeypatch, capsys)
    assert code == 0, err
    metrics = copy / "metrics.json"
    edited = metrics.read_text().replace('"pool": "mean"', '"pool": "general"')
    assert edited != metrics.read_text()
    metrics.write_text(edited)
    code, err = run_cli(["report", str(copy)], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "no longer matches" in err, err


# 9. nothing but the one line before an error


def test_a_bad_context_layer_prints_only_its_line(tmp_path: Path, tiny_bert: Path) -> None:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients\n" * 20)
    done = subprocess.run(
        [sys.executable, "-m", "greenadapt", "w2v", "-c", str(corpus), "-m", str(tiny_bert), "--source", "context",
         "--context-layer", "99", "--w2v-min-count", "1", "--workdir", str(tmp_path / "w"), "-q"],
        capture_output=True, text=True, timeout=HANG_S, env={**os.environ, "GREENADAPT_DEBUG": ""},
    )
    assert done.returncode == EXIT_USAGE
    assert done.stdout == "" and done.stderr.strip().splitlines() == [done.stderr.strip()], done.stderr
    assert "--context-layer 99" in done.stderr


def test_adapt_refuses_a_model_without_weights_before_word2vec(run: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    import shutil

    model = tmp_path / "m"
    shutil.copytree(run["model"], model)
    (model / "model.safetensors").unlink()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the heart rate of patients\n" * 20)
    code, err = run_cli(["adapt", "-c", str(corpus), "-m", str(model), "--dim", "8", "--w2v-min-count", "1", "--workdir",
                         str(tmp_path / "w")],
                        monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT and "no model.safetensors" in err, err
    assert not (tmp_path / "w").exists()
