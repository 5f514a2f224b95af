"""A damaged input folder is refused by the next stage, through the command line, in one line naming the file.

The damage: a truncated or garbled ``manifest.json``, a checksum list that no
longer matches the files, a file the manifest vouches for gone, a manifest
entry without its checksum, a manifest entry naming a file outside the folder.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from cli_helpers import run_cli
from w2v_fixtures import linear_w2v

from greenadapt.artifacts.manifest import MANIFEST, MANIFEST_CHECKSUM
from greenadapt.errors import EXIT_STAGE_CONFLICT
from greenadapt.options import Run


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    from greenadapt.adaptation.align import align_stage

    root = tmp_path_factory.mktemp("manifests")
    w2v, _ = linear_w2v(root / "w2v", tiny_bert, noise=0.01)
    return {"w2v": w2v, "align": align_stage(w2v=w2v, run=Run(out=root / "align")).path}


def _edit_manifest(edit: Callable[[dict], None], *, legacy: bool = False) -> Callable[[Path], None]:
    """Edit the manifest; ``legacy`` also drops its own checksum, as in a manifest written before it existed,
    so the checks of the file list itself are reached."""
    def damage(folder: Path) -> None:
        manifest = json.loads((folder / MANIFEST).read_text())
        edit(manifest)
        if legacy:
            del manifest[MANIFEST_CHECKSUM]
        (folder / MANIFEST).write_text(json.dumps(manifest))

    return damage


def _flip_byte(folder: Path) -> None:
    data = bytearray((folder / "vectors.bin").read_bytes())
    data[-1] ^= 1
    (folder / "vectors.bin").write_bytes(bytes(data))


def _truncate(folder: Path) -> None:
    text = (folder / MANIFEST).read_bytes()
    (folder / MANIFEST).write_bytes(text[: len(text) // 2])


def _garble(folder: Path) -> None:
    (folder / MANIFEST).write_bytes(b"\xff\xfe\x00garbage\x81")


def _flip_checksum(manifest: dict) -> None:
    meta = manifest["files"]["vectors.bin"]
    meta["sha256"] = ("0" if meta["sha256"][0] != "0" else "1") + meta["sha256"][1:]


def _drop_checksum(manifest: dict) -> None:
    del manifest["files"]["counts.tsv"]["sha256"]


def _outside(manifest: dict) -> None:
    manifest["files"]["../align/manifest.json"] = manifest["files"].pop("counts.tsv")


def _json_list(folder: Path) -> None:
    (folder / MANIFEST).write_text("[1, 2, 3]\n")


CASES = {
    # name: (damage, what the one line must say, the file it must name, the fix it must give)
    "truncated manifest": (_truncate, "manifest.json is not valid JSON", MANIFEST, "delete"),
    "garbled manifest": (_garble, "manifest.json is not UTF-8", MANIFEST, "delete"),
    "manifest not an object": (_json_list, "not an object", MANIFEST, "delete"),
    "edited manifest": (_edit_manifest(_flip_checksum), "manifest.json is edited by hand", MANIFEST, "--force"),
    "tampered file": (_flip_byte, "vectors.bin does not match its checksum", "", "--force"),
    "tampered checksum (legacy manifest)": (_edit_manifest(_flip_checksum, legacy=True), "vectors.bin does not match its checksum", "",
                                            "--force"),
    "entry without checksum": (_edit_manifest(_drop_checksum, legacy=True), "entry for counts.tsv is damaged", MANIFEST, "--force"),
    "entry outside the folder": (_edit_manifest(_outside, legacy=True), "a file outside its folder", MANIFEST, "--force"),
    "missing file": (lambda folder: (folder / "counts.tsv").unlink(), "counts.tsv is missing", "", "--force"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_align_refuses_a_damaged_w2v_folder(case: str, pristine: dict[str, Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    damage, says, names, fix = CASES[case]
    w2v = shutil.copytree(pristine["w2v"], tmp_path / "w2v")
    damage(w2v)
    code, err = run_cli(["align", "--w2v", str(w2v), "--out", str(tmp_path / "align")], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert says in lines[0]
    assert f"{w2v / names}".rstrip("/") + ":" in lines[0]  # the folder, or its manifest.json when that is the damage
    assert fix in lines[0]  # the fix
    assert not (tmp_path / "align").exists()
    assert not list(tmp_path.glob(".align.tmp-*"))


def test_expand_refuses_a_truncated_align_manifest(pristine: dict[str, Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    aligned = shutil.copytree(pristine["align"], tmp_path / "align")
    _truncate(aligned)
    code, err = run_cli(["expand", "--align", str(aligned), "--out", str(tmp_path / "expanded")], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    assert err.startswith(f"error: {aligned / MANIFEST}: manifest.json is not valid JSON"), err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "expanded").exists()


def test_a_damaged_output_is_not_skipped_over(pristine: dict[str, Path], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Rerunning onto an output whose manifest is unreadable: refused even with --force (nothing says greenadapt
    wrote that folder), redone once the user removed it. An edited but readable manifest is redone with --force."""
    aligned = shutil.copytree(pristine["align"], tmp_path / "align")
    _truncate(aligned)
    args = ["align", "--w2v", str(pristine["w2v"]), "--out", str(aligned)]
    for extra in ([], ["--force"]):
        code, err = run_cli([*args, *extra], monkeypatch, capsys)
        assert code == EXIT_STAGE_CONFLICT and "not valid JSON" in err and "choose a new or empty folder" in err, err
        assert (aligned / "map.npy").is_file()  # untouched
    shutil.rmtree(aligned)
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == 0, err
    _edit_manifest(lambda m: m["stats"].update(n_shared=1))(aligned)
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "edited by hand" in err and "--force" in err, err
    code, err = run_cli([*args, "--force"], monkeypatch, capsys)
    assert code == 0, err
    from greenadapt.artifacts.manifest import load_stage

    load_stage(aligned, "align")
