"""StageRun: atomic folders, manifests with checksums, locks, skip-if-unchanged."""

from __future__ import annotations

import errno
import multiprocessing as mp
import os
import signal
from pathlib import Path

import pytest
from conftest import HANG_S

from greenadapt.artifacts import stage
from greenadapt.artifacts.manifest import fingerprint, load_stage, read_manifest, verify_files
from greenadapt.artifacts.stage import StageRun
from greenadapt.errors import LockedError, OutputExistsError, ResourceError, StageError


def _make(out: Path, config: dict, *, payload: str = "hello", force: bool = False) -> StageRun:
    with StageRun("demo", out, config, [{"input": "x"}], force=force) as run:
        if not run.skipped:
            (run.tmp / "data.txt").write_text(payload)
            (run.tmp / "sub").mkdir()
            (run.tmp / "sub" / "more.bin").write_bytes(b"\x00\x01")
            run.commit(stats={"n": 1})
    return run


def test_commit_writes_complete_folder_with_checksums(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    run = _make(out, {"a": 1})
    manifest = read_manifest(out)
    assert manifest is not None and manifest["kind"] == "demo"
    assert set(manifest["files"]) == {"data.txt", "sub/more.bin"}
    assert manifest["fingerprint"] == run.fingerprint == fingerprint("demo", {"a": 1}, [{"input": "x"}])
    assert manifest["cost"]["wall_seconds"] >= 0 and manifest["cost"]["peak_rss_mib"] > 0
    assert verify_files(out, manifest) is None
    # nothing but the finished folder and the lock file is left beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == [".stage.lock", "stage"]


def test_rerun_with_same_inputs_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    before = (out / "manifest.json").read_text()
    run = _make(out, {"a": 1}, payload="would change")
    assert run.skipped and "up to date" in run.skip_reason
    assert (out / "data.txt").read_text() == "hello"
    assert (out / "manifest.json").read_text() == before


def test_changed_options_refuse_without_force_and_redo_with_it(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    with pytest.raises(OutputExistsError, match="changed: a"):
        _make(out, {"a": 2})
    run = _make(out, {"a": 2}, payload="new", force=True)
    assert not run.skipped
    assert (out / "data.txt").read_text() == "new"
    assert read_manifest(out)["config"] == {"a": 2}


def test_failure_inside_stage_leaves_previous_output_untouched(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    with pytest.raises(RuntimeError):
        with StageRun("demo", out, {"a": 2}, [], force=True) as run:
            (run.tmp / "data.txt").write_text("partial")
            raise RuntimeError("boom")
    assert (out / "data.txt").read_text() == "hello"
    assert verify_files(out, read_manifest(out)) is None
    assert not list(tmp_path.glob(".stage.tmp-*"))


def test_corrupted_output_is_detected(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    (out / "data.txt").write_text("HELLO")  # same size, other bytes
    with pytest.raises(StageError, match="data.txt does not match its checksum"):
        load_stage(out, "demo")
    with pytest.raises(StageError, match="corrupt"):
        _make(out, {"a": 1})


def test_load_stage_names_wrong_kind_and_unfinished_folders(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    with pytest.raises(StageError, match="'demo' folder, a 'w2v' folder is needed"):
        load_stage(out, "w2v")
    half = tmp_path / "half"
    half.mkdir()
    (half / "vectors.bin").write_bytes(b"x")
    with pytest.raises(StageError, match="not a finished greenadapt stage"):
        load_stage(half, "w2v")
    with pytest.raises(OutputExistsError, match="files greenadapt did not write"):
        _make(half, {"a": 1})


def _hold_lock(out: str, ready: mp.Event, release: mp.Event) -> None:  # type: ignore[type-arg]
    with StageRun("demo", out, {"a": 1}, []):
        ready.set()
        release.wait(HANG_S)


def test_second_writer_fails_fast_with_a_clear_message(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    ctx = mp.get_context("fork")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(out), ready, release))
    holder.start()
    try:
        assert ready.wait(HANG_S)
        with pytest.raises(LockedError, match=f"greenadapt pid {holder.pid}"):
            _make(out, {"a": 1})
    finally:
        release.set()
        holder.join(HANG_S)
    _make(out, {"a": 1})  # lock released: now it works
    assert (out / "data.txt").read_text() == "hello"


def _killed_writer(out: str) -> None:
    with StageRun("demo", out, {"a": 9}, [], force=True) as run:
        (run.tmp / "data.txt").write_text("partial")
        os.kill(os.getpid(), signal.SIGKILL)


def test_sigkill_mid_stage_leaves_previous_output_and_next_run_cleans_up(tmp_path: Path) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    proc = mp.get_context("fork").Process(target=_killed_writer, args=(str(out),))
    proc.start()
    proc.join(HANG_S)
    assert proc.exitcode == -signal.SIGKILL
    assert (out / "data.txt").read_text() == "hello"
    assert list(tmp_path.glob(".stage.tmp-*")), "the killed run's temporary is still there"
    _make(out, {"a": 1})  # the next run (holding the lock) removes it
    assert not list(tmp_path.glob(".stage.tmp-*"))


def test_unwritable_parent_gives_resource_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def denied(self: Path, *args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", denied)
    with pytest.raises(ResourceError, match="cannot write here"):
        _make(tmp_path / "new" / "stage", {"a": 1})


def test_disk_full_while_committing_keeps_previous_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})

    def full(path: Path, obj: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(stage, "write_json", full)
    with pytest.raises(ResourceError, match="disk full"):
        _make(out, {"a": 2}, payload="new", force=True)
    assert (out / "data.txt").read_text() == "hello"
    assert verify_files(out, read_manifest(out)) is None
    assert not list(tmp_path.glob(".stage.tmp-*"))


def _hold_lock_until(out: str, ready: mp.Event, release: mp.Event, done: str) -> None:  # type: ignore[type-arg]
    with StageRun("demo", out, {"a": 1}, [{"input": "x"}]) as run:  # up to date: only checks, as a concurrent rerun does
        assert run.skipped
        ready.set()
        release.wait(HANG_S)
        Path(done).write_text("released")  # still inside: the lock goes only after this line


def test_an_up_to_date_output_locked_by_a_short_check_is_waited_for(tmp_path: Path) -> None:
    """Clock-free: the holder keeps the lock until told to let go, and says so just before it does."""
    import threading

    out = tmp_path / "stage"
    _make(out, {"a": 1})
    ctx = mp.get_context("fork")
    ready, release, done = ctx.Event(), ctx.Event(), tmp_path / "released"
    holder = ctx.Process(target=_hold_lock_until, args=(str(out), ready, release, str(done)))
    holder.start()
    try:
        assert ready.wait(HANG_S)
        threading.Timer(0.5, release.set).start()
        with StageRun("demo", out, {"a": 1}, [{"input": "x"}]) as run:  # no --wait: still no LockedError
            assert run.skipped
        assert done.exists()  # it did wait for the holder to let go
        holder.join(HANG_S)
        # A run that would redo the stage keeps failing fast, however long the holder holds.
        ready.clear()
        release.clear()
        other = ctx.Process(target=_hold_lock_until, args=(str(out), ready, release, str(tmp_path / "again")))
        other.start()
        assert ready.wait(HANG_S)
        with pytest.raises(LockedError):
            _make(out, {"a": 2})
        release.set()
        other.join(HANG_S)
    finally:
        release.set()
        holder.join(HANG_S)


# --------------------------------------------------------------------------
# The manifest as a typed record


def _rewrite(out: Path, **changes: object) -> None:
    """Change manifest fields the way a buggy or foreign writer would: with a matching self-checksum."""
    import json

    from greenadapt.artifacts.manifest import MANIFEST_CHECKSUM, manifest_checksum

    path = out / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.update(changes)
    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest))


def test_manifest_sections_are_typed_and_nested_ones_checked(tmp_path: Path) -> None:
    from greenadapt.artifacts.manifest import Manifest

    out = tmp_path / "stage"
    _make(out, {"a": 1, "model": {"path": "/m"}})
    manifest = load_stage(out, "demo")
    assert isinstance(manifest, Manifest) and manifest.kind == "demo"
    assert manifest.config == {"a": 1, "model": {"path": "/m"}} and manifest.stats == {"n": 1}
    assert manifest.section("config", "model") == {"path": "/m"} and manifest.section("config", "absent") == {}
    assert dict(manifest) == read_manifest(out)  # still the document as written (--json, manifest["stats"])
    with pytest.raises(StageError, match=r"field 'config.a' is int, not an object") as info:
        manifest.section("config", "a", "b")
    assert info.value.path == str(out / "manifest.json")


@pytest.mark.parametrize(("field", "value", "found"), [("stats", [1], "a list"), ("config", "x", "a string"), ("inputs", {}, "an object")])
def test_a_damaged_manifest_section_is_refused_naming_the_file_and_field(tmp_path: Path, field: str, value: object, found: str) -> None:
    out = tmp_path / "stage"
    _make(out, {"a": 1})
    _rewrite(out, **{field: value})
    with pytest.raises(StageError, match=f"damaged manifest: its field '{field}' is {found}") as info:
        load_stage(out, "demo", checksums=False)
    assert info.value.path == str(out / "manifest.json") and "--force" in info.value.one_line()


def test_each_file_is_hashed_once_per_process_while_it_stays_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from greenadapt.artifacts import files as files_module

    reads: list[Path] = []
    real = files_module._sha256_contents
    monkeypatch.setattr(files_module, "_sha256_contents", lambda path: reads.append(path) or real(path))
    data = tmp_path / "vectors.bin"
    data.write_bytes(b"x" * 1000)
    first = files_module.sha256_file(data)
    assert files_module.sha256_file(data) == first and len(reads) == 1  # verified again: not read again
    data.write_bytes(b"y" * 1000)  # same size, new content: a new modification time
    os.utime(data, ns=(data.stat().st_atime_ns, data.stat().st_mtime_ns + 1_000_000))
    second = files_module.sha256_file(data)
    assert second != first and len(reads) == 2
    copy = tmp_path / "copy.bin"
    copy.write_bytes(data.read_bytes())  # another file (inode) with the same bytes is hashed on its own
    assert files_module.sha256_file(copy) == second and len(reads) == 3


def test_a_file_written_through_hashed_writer_is_not_read_back_to_be_checksummed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """expand writes the model through HashedWriter; the stage's checksum of its outputs then reads nothing."""
    import hashlib

    from greenadapt.artifacts import files as files_module

    reads: list[Path] = []
    real = files_module._sha256_contents
    monkeypatch.setattr(files_module, "_sha256_contents", lambda path: reads.append(path) or real(path))
    parts = [b"header", bytes(range(256)) * 4000, b"", b"tail"]
    out = tmp_path / "model.bin"
    with files_module.HashedWriter(out) as handle:
        for part in parts:
            handle.write(part)
    assert out.read_bytes() == b"".join(parts)
    assert files_module.sha256_file(out) == hashlib.sha256(b"".join(parts)).hexdigest() and reads == []

    failed = tmp_path / "failed.bin"
    with pytest.raises(RuntimeError), files_module.HashedWriter(failed) as handle:
        handle.write(b"half")
        raise RuntimeError("the writer stopped")
    assert files_module.sha256_file(failed) == hashlib.sha256(b"half").hexdigest() and reads == [failed]  # hashed afresh


def _over_file(out: Path, source: Path) -> StageRun:
    from greenadapt.artifacts.files import file_identity

    with StageRun("demo", out, {"a": 1}, [{"role": "corpus", **file_identity(source)}]) as run:
        if not run.skipped:
            (run.tmp / "data.txt").write_text(source.read_text())
            run.commit()
    return run


def test_an_input_whose_time_alone_changed_keeps_the_output_up_to_date(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # A copy, a checkout or a refreshed data folder gives a file a new modification time, not new content.
    source = tmp_path / "corpus.txt"
    source.write_text("the same words\n")
    out = tmp_path / "stage"
    _over_file(out, source)
    recorded = read_manifest(out)["inputs"][0]
    assert recorded["sha256"] == __import__("hashlib").sha256(b"the same words\n").hexdigest()
    os.utime(source, ns=(recorded["mtime_ns"] + 7_000_000_000, recorded["mtime_ns"] + 7_000_000_000))
    before = (out / "manifest.json").read_text()
    with caplog.at_level("INFO", logger="greenadapt.artifacts.stage"):
        again = _over_file(out, source)
    assert again.skipped and (out / "manifest.json").read_text() == before
    assert "changed only in modification time" in caplog.text and str(source) in caplog.text


def test_an_edited_input_is_named_with_what_changed(tmp_path: Path) -> None:
    source = tmp_path / "corpus.txt"
    source.write_text("the same words\n")
    out = tmp_path / "stage"
    _over_file(out, source)
    mtime = read_manifest(out)["inputs"][0]["mtime_ns"]
    source.write_text("the sane words\n")  # the same size, new content
    os.utime(source, ns=(mtime + 7_000_000_000, mtime + 7_000_000_000))
    with pytest.raises(OutputExistsError, match=r"corpus.txt was modified: .* then, .* now, and its content differs"):
        _over_file(out, source)
    source.write_text("a longer text than before\n")
    with pytest.raises(OutputExistsError, match=r"corpus.txt changed: 15 bytes then, 26 now"):
        _over_file(out, source)
    assert (out / "data.txt").read_text() == "the same words\n"  # nothing was replaced


def test_an_output_of_an_earlier_version_without_digests_says_it_cannot_compare(tmp_path: Path) -> None:
    import json

    from greenadapt.artifacts.manifest import manifest_checksum

    source = tmp_path / "corpus.txt"
    source.write_text("the same words\n")
    out = tmp_path / "stage"
    _over_file(out, source)
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["inputs"][0]["sha256"]
    manifest.pop("manifest_sha256")
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    os.utime(source, ns=(manifest["inputs"][0]["mtime_ns"] + 10**9,) * 2)
    with pytest.raises(OutputExistsError, match="its content was not recorded, so it cannot be compared"):
        _over_file(out, source)


def test_a_file_rewritten_during_the_run_gets_no_digest(tmp_path: Path) -> None:
    from greenadapt.artifacts.manifest import recorded_inputs
    from greenadapt.artifacts.files import file_identity

    source = tmp_path / "corpus.txt"
    source.write_text("the same words\n")
    identity = file_identity(source)  # what the run started from
    source.write_text("the sane words\n")  # rewritten while the stage ran: same size, new time
    os.utime(source, ns=(identity["mtime_ns"] + 10**9,) * 2)
    recorded = recorded_inputs([identity], tmp_path / "out")[0]
    assert "sha256" not in recorded and recorded["relpath"] == "../corpus.txt"
    assert "sha256" in recorded_inputs([file_identity(source)], tmp_path / "out")[0]


def test_a_changed_option_is_named_down_to_its_nested_key_with_both_values() -> None:
    from greenadapt.artifacts.differences import config_difference

    old = {"task": "ner", "train": {"lr": 5e-05, "epochs": 3}, "model": {"path": "/m"}}
    new = {"task": "ner", "train": {"lr": 0.0001, "epochs": 3}, "model": {"path": "/m"}}
    assert config_difference(old, new) == "changed: train.lr 5e-05 -> 0.0001"
    assert config_difference({"a": 1}, {"a": 2, "b": "x" * 40}) == "changed: a 1 -> 2, b"


def test_a_secret_seen_in_a_url_and_part_of_a_path_leaves_the_manifest_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Credentials seen in this process are scrubbed from every file greenadapt writes, a manifest included; its
    checksum is over what is written, so the stage reads back whole and a rerun is up to date, not 'edited by hand'.
    A URL's user name beside a password is an identity, not the secret: a path that holds it stays readable in the
    record (later stages read paths back from it); a bare user name, often a token, is scrubbed even there."""
    from greenadapt import redaction

    monkeypatch.setattr(redaction, "_LOG_SECRETS", set())  # this test's secrets stay this test's
    monkeypatch.setattr(redaction, "_IDENTITIES", set())
    redaction.redact_url("https://alice:tok12345@example.org/corpus.txt")  # a corpus URL: alice is an identity, tok12345 a secret
    redaction.redact_url("https://ghp_bare987@example.org/corpus.txt")  # a bare user: the token itself
    for holder in ("alice", "tok12345", "ghp_bare987"):
        out = tmp_path / f"{holder}-runs" / "stage"
        corpus = str(tmp_path / f"{holder}-corpus.txt")
        _make(out, {"corpus": corpus})
        written = (out / "manifest.json").read_text()
        if holder == "alice":
            assert corpus in written  # the path as it is: a later stage finds it
        else:
            assert holder not in written and "***" in written  # scrubbed, as every file greenadapt writes
        load_stage(out, "demo")  # whole: no StageError
        again = _make(out, {"corpus": corpus})
        assert again.skipped and "up to date" in again.skip_reason
    assert redaction.scrub_secrets("read for alice") == "read for ***"  # what is shown and logged hides the identity too
