"""The sixth reliability round (issue 71): a link planted at a name greenadapt writes, credentials in any spelling,
inputs that expand without bound, checks that ran after training, and what compare says while it waits.

Item 1's tests plant, at every name greenadapt writes or removes beside a user's files, a symbolic link to a canary
(and, for the lock, a folder, a FIFO, a hard link and a file of the user's): the canary's bytes and the link must be
exactly as they were after the command, and the command either refuses in one line (exit 5) or leaves the name alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_helpers import run_cli
from conftest import build_tiny_bert
from finetune_helpers import build_tiny_expanded, write_ner_file

from greenadapt.errors import EXIT_RESOURCE

CANARY = b"the user's own bytes\n" * 10


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("round6")
    made = {
        "root": root,
        "plain": build_tiny_bert(root / "plain", head="base"),
        "expanded": build_tiny_expanded(root / "expanded"),
        "ner": write_ner_file(root / "ner.tsv", 16, seed=1),
        "ner_test": write_ner_file(root / "ner-test.tsv", 8, seed=2),
    }
    from greenadapt.api import finetune

    finetune(task="ner", train=made["ner"], model=made["plain"], out=root / "run", max_steps=2, device="cpu", progress=False)
    made["run"] = root / "run"
    return made


def _one_line(code: int, err: str, expected: int) -> None:
    assert code == expected, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and "internal error" not in err, err


def _canary(folder: Path) -> Path:
    """A user's file outside the run's folders, with bytes of its own."""
    folder.mkdir(parents=True, exist_ok=True)
    canary = folder / "precious.txt"
    canary.write_bytes(CANARY)
    return canary


def _plant(name: Path, target: Path) -> None:
    name.parent.mkdir(parents=True, exist_ok=True)
    name.symlink_to(target)


def _untouched(name: Path, target: Path, canary: Path) -> None:
    assert name.is_symlink() and os.readlink(name) == str(target), name
    assert canary.read_bytes() == CANARY
    if target.is_dir():
        assert sorted(p.name for p in target.iterdir()) == [canary.name], list(target.iterdir())


def _finetune_args(data: dict[str, Path], out: Path) -> list[str]:
    return ["finetune", "--task", "ner", "--train", str(data["ner"]), "--model", str(data["plain"]), "--max-steps", "2",
            "--device", "cpu", "--out", str(out)]


def _compare_args(data: dict[str, Path], out: Path) -> list[str]:
    return ["compare", "--task", "ner", "--train", str(data["ner"]), "--test", str(data["ner_test"]), "--model", f"base={data['plain']}",
            "--model", f"green={data['expanded']}", "--seeds", "1", "--max-steps", "2", "--device", "cpu", "--keep-going",
            "--bootstrap", "100", "--out", str(out)]


# the names finetune and compare write beside a user's files, relative to the output (finetune) or compare's folder
FINETUNE_NAMES = [".{out}.lock", "{out}.checkpoint"]
COMPARE_NAMES = [".{out}.lock", "{out}/compare.json", "{out}/options.json", "{out}/base/seed-1.log", "{out}/base/.seed-1.lock",
                 "{out}/base/seed-1.checkpoint", "{out}/base/seed-1", "{out}/green/.seed-1.ensemble.json"]


@pytest.mark.parametrize("pointing_at", ["file", "folder"])
@pytest.mark.parametrize("name", FINETUNE_NAMES)
def test_a_link_planted_where_finetune_writes_is_refused_and_left_alone(data: dict[str, Path], tmp_path: Path, name: str, pointing_at: str,
                                                                        monkeypatch: pytest.MonkeyPatch,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    canary = _canary(tmp_path / "user")
    target = canary if pointing_at == "file" else canary.parent
    planted = tmp_path / name.format(out="run")
    _plant(planted, target)
    code, err = run_cli(_finetune_args(data, tmp_path / "run"), monkeypatch, capsys)
    _one_line(code, err, EXIT_RESOURCE)
    assert planted.name in err and "did not make" in err
    _untouched(planted, target, canary)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", COMPARE_NAMES)
def test_a_link_planted_where_compare_writes_is_refused_before_any_run(data: dict[str, Path], tmp_path: Path, name: str,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    canary = _canary(tmp_path / "user")
    target = canary.parent if name.endswith(("checkpoint", "seed-1")) else canary
    planted = tmp_path / name.format(out="cmp")
    _plant(planted, target)
    code, err = run_cli(_compare_args(data, tmp_path / "cmp"), monkeypatch, capsys)
    _one_line(code, err, EXIT_RESOURCE)
    assert planted.name in err, err
    _untouched(planted, target, canary)
    assert not list((tmp_path / "cmp").glob("*/seed-1/manifest.json"))  # nothing trained


def test_the_lock_is_never_emptied_when_it_is_not_greenadapts(data: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    lock = tmp_path / ".run.lock"
    canary = _canary(tmp_path / "user")
    cases = {
        "a hard link to the user's file": lambda: os.link(canary, lock),
        "a file of the user's": lambda: lock.write_bytes(CANARY),
        "a folder": lambda: (lock.mkdir(), (lock / "inside.txt").write_bytes(CANARY)),
        "a FIFO": lambda: os.mkfifo(lock),
    }
    for case, plant in cases.items():
        plant()
        code, err = run_cli(_finetune_args(data, tmp_path / "run"), monkeypatch, capsys)
        _one_line(code, err, EXIT_RESOURCE)
        assert canary.read_bytes() == CANARY, case
        if lock.is_dir():
            assert (lock / "inside.txt").read_bytes() == CANARY
            (lock / "inside.txt").unlink()
            lock.rmdir()
        elif lock.is_fifo():
            lock.unlink()
        else:
            assert lock.read_bytes() == CANARY, case
            lock.unlink()
    # a lock greenadapt left (empty, or naming a dead holder) is taken as before
    lock.write_text("greenadapt pid 1 on elsewhere")
    code, err = run_cli(_finetune_args(data, tmp_path / "run"), monkeypatch, capsys)
    assert code == 0, err
    assert lock.read_text() == ""


def test_predict_leaves_a_users_partial_link_and_temporary_lookalikes_alone(data: dict[str, Path], tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "in.txt"
    text.write_text("fever of unknown origin\nno disease here\n")
    out = tmp_path / "out.jsonl"
    user = tmp_path / "user"
    user.mkdir()
    notes = user / "notes.greenadapt-deadbeef.tmp"  # a user's file whose name happens to hold greenadapt's tag
    notes.write_bytes(CANARY)
    partial = tmp_path / "out.jsonl.partial"
    partial.symlink_to(notes)
    lookalike_folder = tmp_path / ".out.jsonl.greenadapt-deadbeef.tmp"
    lookalike_folder.mkdir()
    (lookalike_folder / "keep.txt").write_bytes(CANARY)
    lookalike_file = tmp_path / ".out.jsonl.greenadapt-0badcafe.tmp"  # a plain file of that name, not marked as greenadapt's
    lookalike_file.write_bytes(CANARY)
    code, err = run_cli(["predict", "--model", str(data["run"]), str(text), "-o", str(out)], monkeypatch, capsys)
    assert code == 0, err
    assert len(out.read_text().splitlines()) == 2
    assert partial.is_symlink() and os.readlink(partial) == str(notes) and notes.read_bytes() == CANARY
    assert (lookalike_folder / "keep.txt").read_bytes() == CANARY and lookalike_file.read_bytes() == CANARY


def test_a_killed_writes_temporary_and_dangling_sidecar_are_removed_by_the_next_write(tmp_path: Path) -> None:
    """What the next write removes is what greenadapt can prove it made: its marked temporary, its dangling sidecar."""
    import fcntl

    from greenadapt.artifacts.files import atomic_writer, mark_ours

    path = tmp_path / "out.jsonl"
    dead = tmp_path / ".out.jsonl.greenadapt-12345678.tmp"
    descriptor = os.open(dead, os.O_WRONLY | os.O_CREAT, 0o644)
    mark_ours(descriptor)  # as atomic_writer marks its own; the writer then died (no lock held)
    os.close(descriptor)
    sidecar = tmp_path / "out.jsonl.partial"
    sidecar.symlink_to(".out.jsonl.greenadapt-87654321.tmp")  # a killed write's sidecar: dangling
    with atomic_writer(path, sidecar=True, user_path=True) as handle:
        handle.write("new\n")
        assert sidecar.is_symlink() and os.readlink(sidecar) != ".out.jsonl.greenadapt-87654321.tmp"
    assert path.read_text() == "new\n" and not dead.exists() and not sidecar.exists() and not sidecar.is_symlink()
    # a live writer's temporary (its lock held) stays
    live = tmp_path / ".out.jsonl.greenadapt-aaaaaaaa.tmp"
    held = os.open(live, os.O_WRONLY | os.O_CREAT, 0o644)
    mark_ours(held)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with atomic_writer(path, user_path=True) as handle:
            handle.write("again\n")
        assert live.exists()
    finally:
        os.close(held)


def test_a_link_at_a_file_name_greenadapt_chooses_is_never_written_through(tmp_path: Path) -> None:
    from greenadapt.artifacts.files import write_json
    from greenadapt.errors import ResourceError

    canary = _canary(tmp_path / "user")
    planted = tmp_path / "compare.json"
    planted.symlink_to(canary)
    with pytest.raises(ResourceError, match="symbolic link"):
        write_json(planted, {"kind": "compare"})
    _untouched(planted, canary, canary)
    # the user's own output path is still written through, as a shell redirection would
    from greenadapt.artifacts.files import atomic_write_text

    mine = tmp_path / "mine.txt"
    mine.symlink_to(canary)
    atomic_write_text(mine, "predictions\n", user_path=True)
    assert mine.is_symlink() and canary.read_text() == "predictions\n"
    json.dumps({})  # (json imported for the tests below)


# -- 4. every check before the first expensive step, whatever the source --------------------------------------------

def _command_fields() -> dict[str, tuple[type, list[tuple[str, str, type]]]]:
    """Per command: its settings class and its numeric options (field, flag, int or float)."""
    import typing

    import greenadapt.api  # noqa: F401  (every command's settings class, without registering CLI commands twice)
    from greenadapt.options import Settings, declared_fields

    def below(cls: type) -> list[type]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]

    found = {}
    for cls in below(Settings):
        if not cls.command or not cls.__module__.startswith("greenadapt."):  # (another test's throwaway subclasses are not commands)
            continue
        hints = typing.get_type_hints(cls)
        numeric = []
        for field, declared in declared_fields(cls):
            kinds = [m for m in (typing.get_args(hints[field.name]) or (hints[field.name],)) if m in (int, float)]
            if kinds and declared.flags[0].startswith("--") and declared.parse is None:
                numeric.append((field.name, declared.flags[0], kinds[0]))
        found[cls.command] = (cls, numeric)
    return found


# each command's required options, pointing at files that do not exist: an option the checks accept then fails
# the same way from either source (no such file), so the two sources are compared on the checks alone
def _required(missing: Path) -> dict[str, list[str]]:
    m = str(missing)
    return {
        "adapt": ["--corpus", m], "w2v": ["--corpus", m], "align": ["--w2v", m], "expand": ["--align", m],
        "finetune": ["--task", "ner", "--train", m], "evaluate": ["--model", m, m], "predict": ["--model", m, m],
        "compare": ["--task", "ner", "--train", m, "--test", m, "--model", f"a={m}", "--model", f"b={m}"],
        "pretrain": ["--corpus", m], "qa": ["--model", m, "--data", m], "second-view": ["--model", m],
        "multitask": ["--task", f"name=t,type=ner,train={m}"],
    }


HOSTILE = {"nan": "nan", "inf": "inf", "huge": "1e30", "negative": "-1"}


@pytest.mark.parametrize("command", ["adapt", "w2v", "align", "expand", "finetune", "evaluate", "predict", "compare", "pretrain", "qa",
                                     "second-view", "multitask"])
def test_every_numeric_option_is_checked_alike_from_the_command_line_and_a_config_file(command: str, tmp_path: Path,
                                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    cls, numeric = _command_fields()[command]
    assert numeric or command in ("evaluate", "predict"), command
    base = [command, *_required(tmp_path / "missing.txt")[command], *(["--out", str(tmp_path / "out")]
                                                                      if command not in ("evaluate", "predict") else [])]
    mismatches = []
    for name, flag, kind in numeric:
        for label, text in HOSTILE.items():
            config = tmp_path / "config.toml"
            value = text if kind is float or label in ("nan", "inf") else ("1000000000000000000000000000000" if label == "huge" else text)
            config.write_text(f"{name} = {value}\n")
            cli_code, cli_err = run_cli([*base, flag, value if not value.startswith("-") else value], monkeypatch, capsys) \
                if not value.startswith("-") else run_cli([*base, f"{flag}={value}"], monkeypatch, capsys)
            file_code, file_err = run_cli([*base, "--config", str(config)], monkeypatch, capsys)
            for code, err in ((cli_code, cli_err), (file_code, file_err)):
                assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err and "internal error" not in err, (name, label, err)
                # a refusal is about this option (or the missing input the checks let through), never the command line itself
                assert code != 2 or flag in err or "no such file" in err, (flag, label, err)
            if cli_code != file_code:
                mismatches.append(f"{flag} {label}: command line {cli_code} ({cli_err.strip()[:90]}), config {file_code} "
                                  f"({file_err.strip()[:90]})")
            if label in ("nan", "inf") and kind is float:
                assert cli_code == file_code == 2, (name, label, cli_err, file_err)
    assert not mismatches, "\n".join(mismatches)


# -- 2. one scrubber: credentials in any spelling appear nowhere -----------------------------------------------------

PASSWORD = "Pw6s3cretZ"
SPELLINGS = {
    "two slashes": "http://bob:{pw}@127.0.0.1:9/{name}",
    "one slash": "http:/bob:{pw}@127.0.0.1:9/{name}",
    "bare": "bob:{pw}@127.0.0.1:9/{name}",
    "object store": "s3://AKIDEXAMPLE:{pw}@bucket/{name}",
}
# (case, the command line with {a} where the address goes, spellings to skip: an object-store input would be fetched)
LEAK_CASES = [
    ("finetune --train", ["finetune", "--task", "ner", "--train", "{a}", "--model", "{plain}", "--out", "{tmp}/o"], ("object store",)),
    ("finetune --test", ["finetune", "--task", "ner", "--train", "{ner}", "--test", "{a}", "--model", "{plain}", "--out", "{tmp}/o"], ()),
    ("finetune --model", ["finetune", "--task", "ner", "--train", "{ner}", "--model", "{a}", "--out", "{tmp}/o"], ()),
    ("finetune --out", ["finetune", "--task", "ner", "--train", "{ner}", "--model", "{plain}", "--max-steps", "1", "--out", "{a}"], ()),
    ("finetune --workdir", ["finetune", "--task", "ner", "--train", "{ner}", "--model", "{plain}", "--workdir", "{a}"], ()),
    ("evaluate data", ["evaluate", "--model", "{run}", "{a}"], ("object store",)),
    ("evaluate --model", ["evaluate", "--model", "{a}", "{ner}"], ()),
    ("predict input", ["predict", "--model", "{run}", "{a}"], ("object store",)),
    ("predict .gz input", ["predict", "--model", "{run}", "{a}.gz"], ("object store",)),
    ("predict --output", ["predict", "--model", "{run}", "{text}", "-o", "{a}"], ()),
    ("qa --data", ["qa", "--model", "{plain}", "--data", "{a}"], ("object store",)),
    ("multitask train=", ["multitask", "--task", "name=t,type=ner,train={a}", "--model", "{plain}", "--out", "{tmp}/o"], ("object store",)),
    ("compare --train", ["compare", "--task", "ner", "--train", "{a}", "--test", "{ner}", "--model", "a={plain}", "--model", "b={plain}",
                         "--out", "{tmp}/c"], ()),
    ("compare --model", ["compare", "--task", "ner", "--train", "{ner}", "--test", "{ner}", "--model", "a={plain}", "--model", "b={a}",
                         "--out", "{tmp}/c"], ()),
    ("compare --out", ["compare", "--task", "ner", "--train", "{ner}", "--test", "{ner}", "--model", "a={plain}", "--model", "b={plain}",
                       "--out", "{a}"], ()),
    ("compare --ray", ["compare", "--task", "ner", "--train", "{ner}", "--test", "{ner}", "--model", "a={plain}", "--model", "b={plain}",
                       "--ray", "bob:{pw}@127.0.0.1:9", "--out", "{tmp}/c"], ()),
    ("second-view --out", ["second-view", "--model", "{plain}", "--out", "{a}"], ()),
    ("w2v --corpus", ["w2v", "--corpus", "{a}", "--out", "{tmp}/w"], ("object store",)),
    ("w2v --out", ["w2v", "--corpus", "{text}", "--out", "{a}"], ()),
    ("align --w2v", ["align", "--w2v", "{a}", "--model", "{plain}", "--out", "{tmp}/al"], ()),
    ("report --html", ["report", "{run}", "--html", "{a}"], ()),
    ("info", ["info", "{a}"], ()),
]


def _run_capturing(args: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    import sys

    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *args])
    monkeypatch.delenv("GREENADAPT_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    return int(info.value.code or 0), captured.out, captured.err


@pytest.mark.parametrize("case", [c[0] for c in LEAK_CASES])
def test_a_password_in_any_spelling_reaches_no_output_or_file(case: str, data: dict[str, Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    _, argv, skipped = next(c for c in LEAK_CASES if c[0] == case)
    text = tmp_path / "in.txt"
    text.write_text("fever of unknown origin\n")
    monkeypatch.chdir(tmp_path)  # a URL taken for a relative folder would be made here
    logged: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append(record.getMessage())

    keep = Keep(logging.DEBUG)
    logging.getLogger().addHandler(keep)
    try:
        for spelling, address in SPELLINGS.items():
            if spelling in skipped:
                continue
            values = {"a": address.format(pw=PASSWORD, name="t.tsv"), "pw": PASSWORD, "tmp": str(tmp_path), "plain": str(data["plain"]),
                      "ner": str(data["ner"]), "run": str(data["run"]), "text": str(text)}
            args = [word.format(**values) for word in argv]
            # every secret seen earlier in this process is forgotten: each spelling must be caught as a fresh process would
            monkeypatch.setattr("greenadapt.redaction._LOG_SECRETS", set())
            code, out, err = _run_capturing(args, monkeypatch, capsys)
            assert PASSWORD not in out + err, (spelling, code, out, err)
            assert code != 0 or case in ("info",), (spelling, out, err)  # every such command is refused or fails (no such file)
            assert "Traceback" not in err and "internal error" not in err, (spelling, err)
    finally:
        logging.getLogger().removeHandler(keep)
    assert not [line for line in logged if PASSWORD in line]
    for path in tmp_path.rglob("*"):
        assert PASSWORD not in str(path), path  # no folder or file named after the address
        if path.is_file() and not path.is_symlink():
            assert PASSWORD.encode() not in path.read_bytes(), path


def test_the_scrubber_knows_every_spelling(monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.redaction import scrub_secrets

    monkeypatch.setattr("greenadapt.redaction._LOG_SECRETS", set())
    for spelling, address in SPELLINGS.items():
        url = address.format(pw=PASSWORD, name="t.tsv")
        for line in (f"error: {url}: task file not found", f"cannot open '{url}'", f"--ray={url}", url):
            scrubbed = scrub_secrets(line)
            assert PASSWORD not in scrubbed and "t.tsv" in scrubbed, (spelling, scrubbed)
    # ordinary text keeps its words: an e-mail address, a time, a ratio
    for line in ("mail carol@example.org at 10:30", "F1 79.5: +0.2 @ seed 3", "a:b"):
        assert scrub_secrets(line) == line


# -- 3. bounded memory and disk for any input ------------------------------------------------------------------------

MEMORY_CAP = 3 << 30  # the child's address space: enough for torch and a tiny model, far below what a bomb would take


def _capped_greenadapt(args: list[str], cwd: Path, **env: str) -> tuple[int, str]:
    import resource
    import subprocess
    import sys

    from conftest import HANG_S, REPO

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))

    done = subprocess.run([sys.executable, "-m", "greenadapt", *args], cwd=cwd, capture_output=True, text=True, timeout=HANG_S,
                          preexec_fn=cap, env={**os.environ, "PYTHONPATH": str(REPO), "GREENADAPT_HEARTBEAT": "0", **env}, check=False)
    return done.returncode, done.stderr


def _one_line_bomb(path: Path) -> Path:
    """A few KB of bz2 that expand to one line of 1 GB: a 10 MB stream of one letter, repeated (bz2 reads every stream)."""
    import bz2

    block = bz2.compress(b"a" * (10 << 20))
    path.write_bytes(block * 100)
    assert path.stat().st_size < 10_000
    return path


def _column_bomb(path: Path) -> Path:
    """A gzip file that expands to 1 GB of NER column lines: one compressed member of 10 MB, repeated."""
    import gzip

    member = gzip.compress(("w" * 1000 + "\tO\n").encode() * 10_000, 9)
    path.write_bytes(member * 100)
    return path


def test_a_line_without_end_is_refused_in_bounded_memory(data: dict[str, Path], tmp_path: Path) -> None:
    bomb = _one_line_bomb(tmp_path / "bomb.txt.bz2")
    code, err = _capped_greenadapt(["predict", "--model", str(data["run"]), str(bomb), "-o", "out.jsonl"], tmp_path)
    _one_line(code, err, 3)
    assert "bomb.txt.bz2:1:" in err and "16,777,216 characters" in err, err
    assert not (tmp_path / "out.jsonl").exists()


def test_a_column_bomb_is_spooled_up_to_its_cap_and_the_spool_removed(data: dict[str, Path], tmp_path: Path) -> None:
    bomb = _column_bomb(tmp_path / "bomb.tsv.gz")
    spools = tmp_path / "tmp"
    spools.mkdir()
    code, err = _capped_greenadapt(["predict", "--model", str(data["run"]), str(bomb), "-o", "out.tsv"], tmp_path,
                                   GREENADAPT_MAX_SPOOL_MB="50", TMPDIR=str(spools))
    _one_line(code, err, 3)
    assert "passes the 50 MB" in err and "GREENADAPT_MAX_SPOOL_MB" in err, err
    assert not list(spools.iterdir())


@pytest.mark.parametrize("damage", ["truncated .gz", "corrupt .xz"])
def test_a_damaged_compressed_column_file_leaves_no_spool(data: dict[str, Path], tmp_path: Path, damage: str) -> None:
    import gzip
    import lzma

    columns = data["ner"].read_bytes() * 50
    if damage == "truncated .gz":
        damaged = tmp_path / "test.tsv.gz"
        damaged.write_bytes(gzip.compress(columns)[:-40])
    else:
        damaged = tmp_path / "test.tsv.xz"
        packed = bytearray(lzma.compress(columns))
        packed[len(packed) // 2] ^= 0xFF
        damaged.write_bytes(bytes(packed))
    spools = tmp_path / "tmp"
    spools.mkdir()
    code, err = _capped_greenadapt(["predict", "--model", str(data["run"]), str(damaged), "-o", "out.tsv"], tmp_path, TMPDIR=str(spools))
    _one_line(code, err, 3)
    assert not list(spools.iterdir()), list(spools.iterdir())


def test_a_spool_stopped_by_a_signal_is_removed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from greenadapt.errors import Terminated
    from greenadapt.inference import prediction_input

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)

    def lines() -> object:
        yield "fever\tB\n"
        raise Terminated()

    with pytest.raises(Terminated):
        prediction_input.spool(lines(), io.StringIO(), "<stdin>")  # type: ignore[arg-type]
    assert not list(tmp_path.iterdir())


def test_task_files_and_documents_are_read_in_bounded_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from greenadapt.data.task_files import numbered_lines
    from greenadapt.errors import DataError

    monkeypatch.setattr("greenadapt.structured_text.MAX_LINE_CHARS", 1000)
    long = tmp_path / "long.tsv"
    long.write_text("ok\tO\n" + "x" * 5000 + "\tO\n")
    with pytest.raises(DataError, match="longer than 1,000 characters") as error:
        list(numbered_lines(long))
    assert error.value.one_line().startswith(f"{long}:2:")


# -- 4 (the rest) and 5: checks before any run, switches, what compare says while it waits ---------------------------

@pytest.mark.parametrize("variant", [["--agreement", "green=inf"], ["--agreement", "green=nan"], ["--agreement", "green=-1"],
                                     ["--both-views", "nobody"], ["--ray-storage", "local"], ["--run-cpus", "2"], ["--run-gpus", "nan"]])
def test_compare_refuses_a_variants_option_before_any_run(data: dict[str, Path], tmp_path: Path, variant: list[str],
                                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli([*_compare_args(data, tmp_path / "cmp"), *variant], monkeypatch, capsys)
    _one_line(code, err, 2)
    assert variant[0] in err, err
    assert not (tmp_path / "cmp").exists() or not list((tmp_path / "cmp").glob("*/seed-1"))


def test_r_drop_on_a_one_tokenizer_model_is_a_valid_arm_of_compare(data: dict[str, Path], tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli([*_compare_args(data, tmp_path / "cmp"), "--agreement", "base=1", "--json"], monkeypatch, capsys)
    assert code == 0, err
    manifest = json.loads((tmp_path / "cmp" / "base" / "seed-1" / "manifest.json").read_text())
    assert manifest["config"]["train"]["agreement"] == 1.0


@pytest.mark.parametrize(("value", "keeps"), [("1", True), ("yes", True), ("TRUE", True), ("on", True), ("0", False), ("off", False),
                                                    ("no", False), ("false", False), ("", False)])
def test_switches_take_every_spelling_of_on_and_off(value: str, keeps: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from types import SimpleNamespace

    from greenadapt.comparison.health import keeps_going

    monkeypatch.setenv("GREENADAPT_KEEP_GOING", value)
    assert keeps_going(SimpleNamespace(keep_going=False)) is keeps  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["GREENADAPT_KEEP_GOING", "GREENADAPT_DEBUG", "GREENADAPT_CODECARBON"])
def test_a_switch_that_is_neither_on_nor_off_is_refused_before_any_work(name: str, data: dict[str, Path], tmp_path: Path) -> None:
    code, err = _capped_greenadapt(_finetune_args(data, tmp_path / "run"), tmp_path, **{name: "maybe"})
    _one_line(code, err, 2)
    assert f"${name}='maybe'" in err and "1/true/yes/on" in err, err
    assert not (tmp_path / "run").exists()


def test_compare_wait_says_once_what_it_waits_for(data: dict[str, Path], tmp_path: Path) -> None:
    """A second compare with --wait behind a held lock: one line on stderr naming the holder and how to stop, then it
    finishes once the lock is let go."""
    import subprocess
    import sys
    import time

    from conftest import HANG_S, REPO

    from greenadapt.artifacts.locks import release_output_lock, take_output_lock

    out = tmp_path / "cmp"
    holder = take_output_lock(out, "compare", wait=False)
    try:
        waiting = subprocess.Popen([sys.executable, "-m", "greenadapt", *_compare_args(data, out)[:-2], "--out", str(out), "--wait", "-q"],
                                   stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO), "GREENADAPT_HEARTBEAT": "0"})
        assert waiting.stderr is not None
        import select

        said, _, _ = select.select([waiting.stderr], [], [], HANG_S)
        if not said:
            waiting.kill()
        assert said, "compare --wait said nothing while it waited"
        line = waiting.stderr.readline()
        assert f"greenadapt pid {os.getpid()}" in line and "waiting for" in line and "Ctrl-C" in line, line
        time.sleep(0.5)
        assert waiting.poll() is None  # still waiting
    finally:
        release_output_lock(holder)
    rest = waiting.communicate(timeout=HANG_S)[1]
    assert waiting.returncode == 0, rest
    assert "waiting for" not in rest  # said once


def test_an_address_where_something_else_answers_is_one_line_at_once(data: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """A port where an HTTP server (not Ray's GCS) answers: Ray alone retried it for minutes, printing its C++ client's
    warnings; now one line, nothing of Ray's."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    pytest.importorskip("ray")

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        code, err = run_cli([*_compare_args(data, tmp_path / "cmp"), "--ray", f"127.0.0.1:{server.server_address[1]}"], monkeypatch, capsys)
    finally:
        server.shutdown()
    _one_line(code, err, 2)
    assert "not Ray's GCS" in err and "gcs_client" not in err, err


@pytest.mark.parametrize("name", ["GREENADAPT_WORKERS", "GREENADAPT_HEARTBEAT", "GREENADAPT_TRACKER_TIMEOUT",
                                  "GREENADAPT_CPU_WATTS_PER_CORE",
                                  "GREENADAPT_MAX_SPOOL_MB"])
def test_every_numeric_variable_is_checked_as_its_option_would_be_before_any_work(name: str, data: dict[str, Path], tmp_path: Path) -> None:
    """Issue 71, item 4: environment variables go through the command line's checks (nan, inf, type, bounds), before any
    work, whether or not the command would have read them (finetune reads no $GREENADAPT_WORKERS: it is still checked)."""
    for value in ("nan", "inf", "-1", "lots"):
        code, err = _capped_greenadapt(_finetune_args(data, tmp_path / "run"), tmp_path, **{name: value})
        _one_line(code, err, 2)
        assert f"${name}='{value}'" in err, err
    assert not (tmp_path / "run").exists()
    from greenadapt.switches import env_number

    assert env_number(name, 7, environ={}) == 7 and env_number(name, environ={name: " 12 "}) == 12
