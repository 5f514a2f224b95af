"""Data safety: greenadapt replaces only what it wrote, and checks every option before it works.

Each writing command is pointed (through the command line, as a user would) at
a folder of the user's with ``--force``, at its own workspace, and at what it
reads; each must refuse in one line, quickly, leaving every file as it was.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from cli_helpers import run_cli
from finetune_helpers import build_tiny_expanded, write_ner_file
from w2v_fixtures import linear_w2v

from greenadapt.artifacts.manifest import MANIFEST, load_stage
from greenadapt.artifacts.stage import TEMPORARY_MARKER, StageRun
from greenadapt.errors import EXIT_BAD_INPUT, EXIT_STAGE_CONFLICT, EXIT_USAGE
from greenadapt.options import Run


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """A refusal must come before the work, not after it: any model forward pass or word2vec training fails the
    command (an internal error instead of the expected refusal), whatever the machine's speed."""
    import gensim.models
    import torch

    def work(*args: object, **kwargs: object) -> None:
        raise AssertionError("the work started before the refusal")

    monkeypatch.setattr(torch.nn.Module, "__call__", work)
    monkeypatch.setattr(gensim.models.Word2Vec, "train", work)


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _corpus(path: Path) -> Path:
    words = "the heart rate of patients with tachycardia rose after covid infection and sleep loss".split()
    path.write_text("\n".join(" ".join(words[(i + j) % len(words)] for j in range(12)) for i in range(200)) + "\n")
    return path


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory, tiny_bert: Path) -> dict[str, Path]:
    from greenadapt.adaptation.align import align_stage

    root = tmp_path_factory.mktemp("safety")
    w2v, _ = linear_w2v(root / "w2v", tiny_bert, noise=0.01)
    expanded = build_tiny_expanded(root / "expanded")
    from qa_helpers import build_tiny_expanded_qa, paragraph, squad_file

    qa_model = build_tiny_expanded_qa(root / "qa-model")
    squad = squad_file(root / "squad.json", [{"paragraphs": [paragraph("tachycardia is a fast heart rate .",
                                                                       ("q1", "what is tachycardia ?", [("a fast heart rate", 15)]))]}])
    return {
        "model": tiny_bert,
        "w2v": w2v,
        "align": align_stage(w2v=w2v, run=Run(out=root / "align")).path,
        "corpus": _corpus(root / "corpus.txt"),
        "expanded": expanded,
        "ner": write_ner_file(root / "train.tsv", 24, seed=1),
        "qa_model": qa_model,
        "squad": squad,
    }


def _writers(inputs: dict[str, Path], work: Path) -> dict[str, list[str]]:
    """Every command that writes a folder, with its --out left for the caller to add."""
    small = ["--workers", "1", "--w2v-min-count", "1", "--epochs", "1", "--dim", "8"]
    return {
        "w2v": ["w2v", "-c", str(inputs["corpus"]), "-m", str(inputs["model"]), *small, "--workdir", str(work)],
        "align": ["align", "--w2v", str(inputs["w2v"])],
        "expand": ["expand", "--align", str(inputs["align"])],
        "adapt": ["adapt", "-c", str(inputs["corpus"]), "-m", str(inputs["model"]), *small, "--workdir", str(work)],
        "finetune": ["finetune", "--task", "ner", "--train", str(inputs["ner"]), "--model", str(inputs["expanded"]),
                     "--max-steps", "1", "--device", "cpu", "--workdir", str(work)],
        "finetune-qa": ["finetune", "--task", "qa", "--train", str(inputs["squad"]), "--model", str(inputs["qa_model"]),
                        "--max-steps", "1", "--device", "cpu", "--workdir", str(work)],
        "qa": ["qa", "--model", str(inputs["qa_model"]), "--data", str(inputs["squad"]), "--device", "cpu"],
        "pretrain": ["pretrain", "-c", str(inputs["corpus"]), "-m", str(inputs["model"]), "--max-steps", "1",
                     "--device", "cpu", "--workdir", str(work)],
        "multitask": ["multitask", "--model", str(inputs["expanded"]), "--task", f"name=ner,type=ner,train={inputs['ner']}",
                      "--max-steps", "1", "--device", "cpu", "--workdir", str(work)],
        "w2v-context": ["w2v", "-c", str(inputs["corpus"]), "-m", str(inputs["model"]), "--source", "context", "--w2v-min-count", "1",
                        "--workdir", str(work)],
    }


@pytest.mark.parametrize("command", ["w2v", "align", "expand", "adapt", "finetune", "finetune-qa", "qa", "pretrain", "multitask"])
def test_force_never_replaces_a_users_folder(command: str, inputs: dict[str, Path], tmp_path: Path, no_work: None,
                                              monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    mine = tmp_path / "mine"
    (mine / "notes").mkdir(parents=True)
    (mine / "thesis.tex").write_text("three years of work")
    (mine / "notes" / "todo.txt").write_text("back up")
    before = _tree(mine)
    code, err = run_cli([*_writers(inputs, tmp_path / "work")[command], "--out", str(mine), "--force"], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    assert f"{mine}: refusing to replace this folder" in err and "choose a new or empty folder" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert _tree(mine) == before
    assert not list(tmp_path.glob(".mine.*-*")), "a temporary or renamed copy was left beside it"


def test_a_file_added_to_a_greenadapt_folder_keeps_it_from_being_replaced(
    inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    out = shutil.copytree(inputs["align"], tmp_path / "align")
    (out / "my-notes.md").write_text("the map looks good")
    code, err = run_cli(["align", "--w2v", str(inputs["w2v"]), "--out", str(out), "--force"], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "files greenadapt did not write (my-notes.md)" in err, err
    assert (out / "my-notes.md").read_text() == "the map looks good"
    (out / "my-notes.md").unlink()
    code, err = run_cli(["align", "--w2v", str(inputs["w2v"]), "--out", str(out), "--force"], monkeypatch, capsys)
    assert code == 0, err  # our own folder, untouched by the user: replaced as asked
    load_stage(out, "align")


def test_an_empty_folder_is_a_fine_destination(inputs: dict[str, Path], tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "empty").mkdir()
    code, err = run_cli(["align", "--w2v", str(inputs["w2v"]), "--out", str(tmp_path / "empty")], monkeypatch, capsys)
    assert code == 0, err
    load_stage(tmp_path / "empty", "align")


def test_the_old_output_goes_only_after_the_new_one_is_complete(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "stage"
    with StageRun("demo", out, {"a": 1}, []) as run:
        (run.tmp / "old.txt").write_text("old")
        run.commit()
    with pytest.raises(RuntimeError, match="boom"), StageRun("demo", out, {"a": 2}, [], force=True) as run:
        (run.tmp / "new.txt").write_text("half")
        raise RuntimeError("boom")
    assert (out / "old.txt").read_text() == "old" and load_stage(out, "demo")["config"] == {"a": 1}


@pytest.mark.parametrize("command", ["w2v", "adapt", "finetune", "pretrain", "multitask"])
@pytest.mark.parametrize("where", ["the workspace", "a folder holding the workspace"])
def test_out_at_the_workspace_is_refused(command: str, where: str, inputs: dict[str, Path], tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    work = tmp_path / "outer" / "work"
    (work / "cache" / "pretok").mkdir(parents=True)
    (work / "cache" / "pretok" / "keep.txt").write_text("cache")
    before = _tree(tmp_path / "outer")
    out = work if where == "the workspace" else tmp_path / "outer"
    code, err = run_cli([*_writers(inputs, work)[command], "--out", str(out), "--force"], monkeypatch, capsys)
    assert code == EXIT_USAGE, err
    assert "the workspace" in err and "--out" in err, err
    assert _tree(tmp_path / "outer") == before


@pytest.mark.parametrize(
    ("command", "target"),
    [
        ("align", lambda i: i["w2v"]),  # the input stage itself (a greenadapt folder: --force would have replaced it)
        ("align", lambda i: i["w2v"] / "sub"),  # inside the input
        ("align", lambda i: i["w2v"].parent),  # holding the input
        ("expand", lambda i: i["align"]),
        ("expand", lambda i: i["w2v"]),  # the w2v folder align read
        ("expand", lambda i: i["model"] / "expanded"),  # inside the base model
        ("finetune", lambda i: i["expanded"]),  # the model being fine-tuned
        ("adapt", lambda i: i["model"]),
    ],
)
def test_out_overlapping_an_input_is_refused(command: str, target, inputs: dict[str, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    out = target(inputs)
    watched = inputs["w2v"].parent
    before = _tree(watched)
    code, err = run_cli([*_writers(inputs, tmp_path / "work")[command], "--out", str(out), "--force"], monkeypatch, capsys)
    assert code == EXIT_USAGE, err
    assert "choose an --out outside what this command reads" in err, err
    assert _tree(watched) == before


def test_adapt_out_at_its_own_w2v_stage_is_refused_before_w2v_runs(inputs: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from greenadapt.artifacts import workspace
    from greenadapt.artifacts.pretrained import resolve_model

    work = tmp_path / "work"
    future_w2v = workspace.stage_dir(work, [str(inputs["corpus"])], resolve_model(str(inputs["model"])).slug, "w2v")
    code, err = run_cli([*_writers(inputs, work)["adapt"], "--out", str(future_w2v)], monkeypatch, capsys)
    assert code == EXIT_USAGE and "the w2v stage's folder" in err, err
    assert not work.exists() or not list(work.rglob(MANIFEST))


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--method", "foo"], "unknown --method 'foo'"),
        (["--max-new", "-1"], "--max-new"),
        (["--out", "{file}/model"], "is a file"),
    ],
)
def test_adapt_checks_every_option_before_training_word2vec(extra: list[str], says: str, inputs: dict[str, Path], tmp_path: Path,
                                                            no_work: None, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    extra = [e.replace("{file}", str(a_file)) for e in extra]
    work = tmp_path / "work"
    code, err = run_cli([*_writers(inputs, work)["adapt"], *extra], monkeypatch, capsys)
    assert code == EXIT_USAGE, err
    assert says in err, err
    assert not work.exists() or not any(work.rglob("*.bin")), "word2vec ran before the bad option was found"


def test_one_default_seed_lets_the_documented_flow_reuse_each_stage(inputs: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """`w2v --corpus X` → `align --corpus X` → `adapt --corpus X` with every default: adapt reuses both stages."""
    small = ["--workers", "1", "--w2v-min-count", "1", "--epochs", "1", "--dim", "8"]
    common = ["-m", str(inputs["model"]), "--workdir", str(tmp_path / "work")]
    corpus = ["-c", str(inputs["corpus"])]
    assert run_cli(["w2v", *corpus, *common, *small], monkeypatch, capsys)[0] == 0
    assert run_cli(["align", *corpus, *common], monkeypatch, capsys)[0] == 0
    code, err = run_cli(["adapt", *corpus, *common, *small, "--json"], monkeypatch, capsys)
    assert code == 0, err


def test_every_command_defaults_to_the_same_seed() -> None:
    import inspect

    from greenadapt.adaptation.align import align_stage
    from greenadapt.adaptation.expand import expand_stage
    from greenadapt.cli import _register, app
    from greenadapt.defaults import DEFAULT_SEED
    from greenadapt.runners.finetune.settings import FinetuneSettings

    _register()
    import typer.main

    command = typer.main.get_command(app)
    seeds = {}
    for name, sub in command.commands.items():  # type: ignore[attr-defined]
        for param in sub.params:
            if param.name == "seed":
                seeds[name] = param.default
    assert set(seeds) >= {"w2v", "align", "expand", "adapt", "finetune", "pretrain", "multitask"}
    assert set(seeds.values()) == {DEFAULT_SEED}, seeds
    assert FinetuneSettings(task="ner", train=Path("x")).seed_list == (DEFAULT_SEED,)
    for function in (align_stage, expand_stage):
        assert inspect.signature(function).parameters["seed"].default == DEFAULT_SEED


@pytest.mark.parametrize("command", ["finetune", "pretrain", "multitask", "w2v-context"])
def test_a_pickled_model_gets_the_one_line_refusal(command: str, inputs: dict[str, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import pickle

    from safetensors.torch import load_file

    model = shutil.copytree(inputs["expanded"] if command in ("finetune", "multitask") else inputs["model"], tmp_path / "model")

    state = load_file(str(model / "model.safetensors"))
    (model / "model.safetensors").unlink()

    class Payload:
        def __reduce__(self):  # would run code if ever unpickled unsafely
            return (print, ("pwned",))

    with open(model / "pytorch_model.bin", "wb") as handle:
        pickle.dump({**state, "evil": Payload()}, handle)
    args = _writers({**inputs, "expanded": model, "model": model}, tmp_path / "work")[command]
    code, err = run_cli([*args, "--out", str(tmp_path / "out")], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert f"{model / 'pytorch_model.bin'}: cannot load PyTorch weights safely" in err, err
    assert "weights_only" not in err and "pwned" not in err
    assert len(err.strip().splitlines()) == 1


def test_stale_pretokenization_temporaries_are_removed_on_the_next_run(inputs: dict[str, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    args = _writers(inputs, tmp_path / "work")["w2v"]
    assert run_cli(args, monkeypatch, capsys)[0] == 0
    cache = tmp_path / "work" / "cache" / "pretok"
    (key,) = [p.name for p in cache.iterdir() if not p.name.startswith(".")]
    # What a `--force` run killed mid-way leaves: its temporary beside the finished entry (pid of a dead process).
    stale = cache / f".{key}.tmp-999999-0123abcd"
    stale.mkdir()
    (stale / TEMPORARY_MARKER).write_text("greenadapt pretok output\n")
    (stale / "corpus.txt").write_bytes(b"x" * 1_000_000)
    foreign = cache / f".{key}.tmp-999998-89abcdef"  # the same name pattern without greenadapt's marker: kept
    (foreign / "mine.txt").parent.mkdir()
    (foreign / "mine.txt").write_text("not greenadapt's")
    code, err = run_cli(args, monkeypatch, capsys)  # w2v is up to date: it never reaches the pre-tokenization stage
    assert code == 0, err
    assert not stale.exists()
    assert (foreign / "mine.txt").read_text() == "not greenadapt's"
    assert (cache / key / MANIFEST).is_file()


def test_a_live_runs_temporary_is_left_alone(tmp_path: Path) -> None:
    from greenadapt.artifacts.stage import sweep_stale_temporaries

    out = tmp_path / "entry"
    with StageRun("demo", out, {"a": 1}, []) as run:
        assert run.tmp.is_dir()
        assert sweep_stale_temporaries(tmp_path) == 0  # its lock is held
        assert run.tmp.is_dir()
        run.commit()


def test_predict_never_overwrites_its_input_or_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    model = build_tiny_expanded(tmp_path / "model")
    train = write_ner_file(tmp_path / "train.tsv", 24, seed=1)
    run = tmp_path / "run"
    code, err = run_cli(["finetune", "--task", "ner", "--train", str(train), "--model", str(model), "--out", str(run),
                          "--max-steps", "2", "--device", "cpu"], monkeypatch, capsys)
    assert code == 0, err
    original = train.read_bytes()
    (tmp_path / "outputs").mkdir()
    for output, force, says in (
        (train, True, "--output is the --input file"),
        (tmp_path / "outputs", False, "--output is a folder"),
        (run / "x.tsv", True, "--output lies inside the --model folder"),
    ):
        code, err = run_cli(["predict", "--model", str(run), "--input", str(train), "--output", str(output),
                              *(["--force"] if force else [])], monkeypatch, capsys)
        assert code == EXIT_USAGE and says in err, err
        assert f"{output}:" in err and ".tmp" not in err, err  # the user's path, never a hidden temporary
    assert train.read_bytes() == original
    out = tmp_path / "tagged.tsv"
    out.write_text("mine")
    code, err = run_cli(["predict", "--model", str(run), "--input", str(train), "--output", str(out)], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "--force" in err, err
    assert out.read_text() == "mine"
    code, err = run_cli(["predict", "--model", str(run), "--input", str(train), "--output", str(out), "--force"], monkeypatch, capsys)
    assert code == 0, err
    assert out.read_text() != "mine"


def test_a_latin1_corpus_is_read_with_one_warning_per_file(tiny_bert: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    good = _corpus(tmp_path / "utf8.txt")
    latin = tmp_path / "latin1.txt"
    latin.write_bytes(("caf\u00e9 na\u00efve r\u00e9sum\u00e9 heart rate\n" * 50).encode("latin-1"))
    args = ["w2v", "-c", str(good), "-c", str(latin), "-m", str(tiny_bert), "--workers", "1", "--w2v-min-count", "1",
            "--epochs", "1", "--dim", "8", "--workdir", str(tmp_path / "work"), "--json"]
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", *args])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    assert info.value.code in (0, None), captured.err
    warnings = [line for line in captured.err.splitlines() if "invalid UTF-8" in line]
    assert len(warnings) == 1, captured.err
    assert str(latin) in warnings[0] and "200 invalid UTF-8 byte sequences" in warnings[0]
    stats = json.loads(captured.out)["stats"]
    assert stats["replaced_by_source"] == {str(latin): 200}


def test_a_moved_workspace_stays_up_to_date(inputs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--workers", "1", "--w2v-min-count", "1", "--epochs", "1", "--dim", "8"]
    corpus = ["-c", str(inputs["corpus"]), "-m", str(inputs["model"])]
    code, err = run_cli(["adapt", *corpus, *small, "--workdir", str(tmp_path / "before"), "--json"], monkeypatch, capsys)
    assert code == 0, err
    shutil.move(tmp_path / "before", tmp_path / "after")  # keeps modification times, as mv and cp -a do
    from greenadapt.cli import main

    monkeypatch.setattr(sys, "argv", ["greenadapt", "adapt", *corpus, *small, "--workdir", str(tmp_path / "after"), "--json"])
    with pytest.raises(SystemExit) as info:
        main()
    out = capsys.readouterr()
    assert info.value.code in (0, None), out.err
    stages = json.loads(out.out)["stages"]
    assert all(m["created"] for m in stages.values())
    assert "inputs changed" not in out.err and "other inputs" not in out.err
    align = next((tmp_path / "after").glob("*/*/align"))
    # expand finds the w2v folder align read at its new place (recorded relative to align's folder)
    code, err = run_cli(["expand", "--align", str(align), "--out", str(tmp_path / "again")], monkeypatch, capsys)
    assert code == 0, err
    shutil.rmtree(align.parent / "w2v")
    code, err = run_cli(["expand", "--align", str(align), "--out", str(tmp_path / "third")], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "w2v input was moved" in err, err


def test_outputs_made_before_paths_left_the_fingerprint_stay_up_to_date(tmp_path: Path) -> None:
    from greenadapt.artifacts.manifest import legacy_fingerprint

    upstream = {"stage": "w2v", "path": "/old/place/w2v", "fingerprint": "f", "content": "c"}
    with StageRun("demo", tmp_path / "out", {"a": 1}, [upstream]) as run:
        run.commit()
    manifest_path = tmp_path / "out" / MANIFEST
    manifest = json.loads(manifest_path.read_text())
    manifest["fingerprint"] = legacy_fingerprint("demo", {"a": 1}, [upstream])  # as an older greenadapt wrote it
    from greenadapt.artifacts.manifest import MANIFEST_CHECKSUM, manifest_checksum

    manifest[MANIFEST_CHECKSUM] = manifest_checksum(manifest)
    manifest_path.write_text(json.dumps(manifest))
    moved = {**upstream, "path": "/new/place/w2v"}
    with StageRun("demo", tmp_path / "out", {"a": 1}, [upstream]) as again:
        assert again.skipped
    with StageRun("demo", tmp_path / "out2", {"a": 1}, [upstream]) as first:
        first.commit()
    with StageRun("demo", tmp_path / "out2", {"a": 1}, [moved]) as run_moved:
        assert run_moved.skipped  # the same content at another place


def test_report_replaces_its_own_page_and_no_other_file(inputs: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "report.html"
    code, err = run_cli(["report", str(inputs["align"]), "--html", str(page)], monkeypatch, capsys)
    assert code == 0 and page.is_file(), err
    code, err = run_cli(["report", str(inputs["align"]), "--html", str(page)], monkeypatch, capsys)
    assert code == 0, err  # its own page: replaced
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    code, err = run_cli(["report", str(inputs["align"]), "--html", str(mine)], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT and "not a page greenadapt report wrote" in err, err
    assert mine.read_text() == "<html>my notes</html>"
    code, err = run_cli(["report", str(inputs["align"]), "--html", str(tmp_path)], monkeypatch, capsys)
    assert code == EXIT_USAGE and "--html is a folder" in err, err


@pytest.mark.parametrize("command", ["adapt", "align"])
def test_cleanup_removes_only_greenadapts_own_leftovers(command: str, inputs: dict[str, Path], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.1: names shaped like greenadapt's temporaries, in the user's folder, are the user's."""
    safe = tmp_path / "safe"
    photos = safe / ".photos.old-1-0123abcd"
    photos.mkdir(parents=True)
    (photos / "img.txt").write_text("a photo")
    (safe / ".notes.tmp-2-89abcdef").write_text("notes")
    # This output's own name pattern, but not greenadapt's: no marker, no manifest.
    (safe / ".newout.tmp-3-fedcba98").mkdir()
    (safe / ".newout.tmp-3-fedcba98" / "draft.txt").write_text("a draft")
    # This output's temporary of a killed greenadapt run: its marker is the proof.
    dead = safe / ".newout.tmp-999999-0badf00d"
    dead.mkdir()
    (dead / TEMPORARY_MARKER).write_text("greenadapt expand output\n")
    (dead / "model.safetensors").write_bytes(b"half")
    before = {path.name for path in safe.iterdir()}
    code, err = run_cli([*_writers(inputs, tmp_path / "work")[command], "--out", str(safe / "newout")], monkeypatch, capsys)
    assert code == 0, err
    assert (photos / "img.txt").read_text() == "a photo"
    assert (safe / ".notes.tmp-2-89abcdef").read_text() == "notes"
    assert (safe / ".newout.tmp-3-fedcba98" / "draft.txt").read_text() == "a draft"
    assert not dead.exists()
    after = {path.name for path in safe.iterdir()}
    assert after == (before - {dead.name}) | {"newout", ".newout.lock"}, after  # no lock file for another's name


def test_a_finished_output_has_no_marker_and_its_old_version_is_proven_by_its_manifest(tmp_path: Path) -> None:
    from greenadapt.artifacts.stage import written_by_greenadapt

    out = tmp_path / "entry"
    with StageRun("demo", out, {"a": 1}, []) as run:
        assert (run.tmp / TEMPORARY_MARKER).is_file()
        (run.tmp / "data.txt").write_text("x")
        manifest = run.commit()
    assert not (out / TEMPORARY_MARKER).exists() and TEMPORARY_MARKER not in manifest["files"]
    assert written_by_greenadapt(out)
    user = tmp_path / ".entry.old-1-0123abcd"
    user.mkdir()
    assert not written_by_greenadapt(user)


def test_a_symlinked_out_is_written_through_and_stays_a_link(inputs: dict[str, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.2: the user's link to an empty folder; greenadapt writes into that folder and never replaces the link."""
    (tmp_path / "safe").mkdir()
    target = tmp_path / "elsewhere" / "empty"
    target.mkdir(parents=True)
    link = tmp_path / "safe" / "linkempty"
    link.symlink_to(target)
    args = [*_writers(inputs, tmp_path / "work")["align"], "--out", str(link)]
    for _ in range(2):  # the second run finds the output up to date through the link, and still leaves the link alone
        code, err = run_cli(args, monkeypatch, capsys)
        assert code == 0, err
        assert link.is_symlink() and link.resolve() == target.resolve()
        assert (target / MANIFEST).is_file()
        assert not [p.name for p in (tmp_path / "safe").iterdir() if p.name != "linkempty"], list((tmp_path / "safe").iterdir())
    (target / "thesis.tex").write_text("mine")  # a link to a folder with the user's files: refused as that folder would be
    code, err = run_cli([*args, "--force"], monkeypatch, capsys)
    assert code == EXIT_STAGE_CONFLICT, err
    assert (target / "thesis.tex").read_text() == "mine" and link.is_symlink()


@pytest.mark.parametrize("command", ["finetune", "pretrain", "multitask", "qa", "adapt", "w2v-context"])
def test_a_truncated_safetensors_file_gets_the_one_line_refusal(command: str, inputs: dict[str, Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.3: a truncated model.safetensors is bad input (exit 3) on every path that loads weights, never an internal error."""
    source = {"finetune": "expanded", "multitask": "expanded", "qa": "qa_model"}.get(command, "model")
    model = shutil.copytree(inputs[source], tmp_path / "model")
    weights = model / "model.safetensors"
    for keep in (7, weights.stat().st_size // 2):  # inside the header, and inside the tensors
        weights.write_bytes(weights.read_bytes()[:keep])
        args = _writers({**inputs, source: model, "expanded": model, "model": model, "qa_model": model}, tmp_path / "work")[command]
        code, err = run_cli([*args, "--out", str(tmp_path / "out")], monkeypatch, capsys)
        assert code == EXIT_BAD_INPUT, err
        assert f"{weights}: unreadable safetensors file" in err, err
        assert "internal error" not in err and len(err.strip().splitlines()) == 1, err
        shutil.copy2(inputs[source] / "model.safetensors", weights)


def test_identity_with_a_dim_other_than_the_models_is_a_usage_error_before_word2vec(inputs: dict[str, Path], tmp_path: Path,
                                                                                     no_work: None, monkeypatch: pytest.MonkeyPatch,
                                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.8: a contradiction between options is exit 2 before any work."""
    work = tmp_path / "work"
    args = [*_writers(inputs, work)["adapt"], "--method", "identity", "--out", str(tmp_path / "out")]  # --dim 8; the model has 32
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == EXIT_USAGE, err
    assert "--method identity" in err and "--dim 8" in err and "hidden size 32" in err, err
    assert not list(work.rglob("w2v")), "word2vec ran before the contradiction was found"


@pytest.mark.parametrize("command", ["w2v", "adapt"])
def test_a_model_folder_without_tokenizer_files_is_refused_up_front(command: str, inputs: dict[str, Path], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.9: w2v used to succeed with an empty tokenizer and adapt failed later with "empty shared vocabulary"."""
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy2(inputs["model"] / name, model / name)
    work = tmp_path / "work"
    code, err = run_cli([*_writers({**inputs, "model": model}, work)[command], "--out", str(tmp_path / "out")], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT, err
    assert f"{model}: the model folder has no tokenizer files (tokenizer.json or vocab.txt)" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not list(work.rglob("w2v"))


@pytest.mark.parametrize("command", ["finetune", "finetune-classify", "finetune-qa", "qa", "pretrain", "multitask"])
def test_one_max_length_minimum_and_one_message_for_every_command(command: str, inputs: dict[str, Path], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.7: 2 was refused ("use at least 16") while 3 trained for NER and classification; pretrain took 3, QA 8."""
    from finetune_helpers import write_classify_file

    from greenadapt.defaults import MIN_MAX_LENGTH

    writers = _writers(inputs, tmp_path / "work")
    writers["finetune-classify"] = [
        "finetune", "--task", "classify", "--train", str(write_classify_file(tmp_path / "train.jsonl", 12, seed=1)),
        "--model", str(inputs["expanded"]), "--max-steps", "1", "--device", "cpu", "--workdir", str(tmp_path / "work"),
    ]
    messages = set()
    for length in (2, 3, MIN_MAX_LENGTH - 1):
        code, err = run_cli([*writers[command], "--max-length", str(length), "--out", str(tmp_path / f"out-{length}")], monkeypatch, capsys)
        assert code == EXIT_USAGE, err
        assert len(err.strip().splitlines()) == 1
        messages.add(err.replace(f"--max-length {length} ", "--max-length N "))
        assert not (tmp_path / f"out-{length}").exists()
    assert len(messages) == 1 and f"use at least {MIN_MAX_LENGTH}" in messages.pop()
    code, err = run_cli([*writers[command], "--max-length", str(MIN_MAX_LENGTH), "--out", str(tmp_path / "out-min")], monkeypatch, capsys)
    assert "is too short" not in err, err


def test_text_field_on_a_plain_text_corpus_is_refused(inputs: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.11: --text-field on a .txt corpus was accepted and did nothing."""
    args = [*_writers(inputs, tmp_path / "work")["w2v"], "--text-field", "abstract", "--out", str(tmp_path / "out")]
    code, err = run_cli(args, monkeypatch, capsys)
    assert code == EXIT_USAGE, err
    assert "--text-field abstract" in err and len(err.strip().splitlines()) == 1
    jsonl = tmp_path / "corpus.jsonl"  # where the option means something it is still taken
    jsonl.write_text("".join(json.dumps({"abstract": line}) + "\n" for line in inputs["corpus"].read_text().splitlines()))
    code, err = run_cli([*args[:2], str(jsonl), *args[3:]], monkeypatch, capsys)
    assert code == 0, err


def test_an_empty_question_answering_file_is_an_error(inputs: dict[str, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 36.11: {"data": []} gave "0 questions" and exit 0."""
    empty = tmp_path / "empty.json"
    for document in ({"data": []}, {"data": [{"paragraphs": [{"context": "text", "qas": []}]}]}):
        empty.write_text(json.dumps(document))
        writers = _writers({**inputs, "squad": empty}, tmp_path / "work")
        for command in ("qa", "finetune-qa"):
            code, err = run_cli([*writers[command], "--out", str(tmp_path / "out")], monkeypatch, capsys)
            assert code == EXIT_BAD_INPUT, err
            assert f"{empty}: no questions in this file" in err and len(err.strip().splitlines()) == 1, err


def test_a_corpora_folder_that_does_not_exist_is_warned_about(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Issue 36.11: GREENADAPT_CORPORA=/nonexistent was silently ignored."""
    import logging

    from greenadapt.corpus import recipes

    monkeypatch.setattr(recipes, "_WARNED", set())
    monkeypatch.setenv("GREENADAPT_CORPORA", "/nonexistent/recipes")
    with caplog.at_level(logging.WARNING):
        recipes.recipe_dirs()
        recipes.recipe_dirs()
    warned = [r.getMessage() for r in caplog.records if "GREENADAPT_CORPORA" in r.getMessage()]
    assert warned == ["$GREENADAPT_CORPORA names /nonexistent/recipes, which is not a folder: no recipes are read from it"]
