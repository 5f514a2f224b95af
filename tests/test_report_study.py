"""bench/reproduce_ner.py: the study's plan (dry run) and its subset files, without running anything heavy."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HANG_S
import torch

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "reproduce_ner.py"


def _plan(tmp_path: Path, *args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run", "--workdir", str(tmp_path / "study"), "--model", str(tmp_path / "model"), *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert done.returncode == 0, done.stderr
    return [line[len("$ greenadapt ") :] for line in done.stderr.splitlines() if line.startswith("$ greenadapt ")]


def test_the_plan_covers_every_set_variant_and_seed_then_reports(tmp_path: Path) -> None:
    ner = tmp_path / "ner"
    for name in ("A", "B"):
        (ner / name).mkdir(parents=True)
    plan = _plan(tmp_path, "--ner", str(ner), "--sets", "A,B", "--seeds", "1,2,3")
    commands = [line.split()[0] for line in plan]
    # compare once per seed and set (so a study cut short holds complete pairs), then once per set over every seed
    assert commands == ["adapt"] + ["align", "expand"] * 2 + ["compare"] * (3 * 2) + ["compare"] * 2 + ["report"]
    compares = [line for line in plan if line.startswith("compare")]
    assert [line.split("--seeds ")[1].split()[0] for line in compares] == ["1", "1", "2", "2", "3", "3", "1,2,3", "1,2,3"]
    assert sorted({line.split("--out ")[1].split("/finetune/")[1] for line in compares}) == ["A", "B"]
    for line in compares:  # every variant, the same recipe; the runs land in finetune/<set>/<variant>/seed-<s>/ as before
        assert f"--model base={tmp_path / 'model'} " in line and "--model green=" in line and "/expand " in line
        assert "--model identity=" in line and "--model random=" in line and "--device auto" in line and "--epochs 3 " in line
    assert any("--method identity" in line for line in plan) and any("--method random" in line for line in plan)


def test_selection_variants_expand_fewer_words_on_greens_map(tmp_path: Path) -> None:
    ner = tmp_path / "ner"
    (ner / "A").mkdir(parents=True)
    plan = _plan(tmp_path, "--ner", str(ner), "--sets", "A", "--seeds", "1", "--variants",
                 "green,green-min20,green-max5k,green-min100-max20k")
    expands = [line for line in plan if line.startswith("expand")]
    assert len(expands) == 3 and all("/align " in line for line in expands)  # green's own align folder: the same map
    options = {line.split("--out ")[1].rsplit("/", 1)[1]: line for line in expands}
    assert "--min-count-new 20 " in options["expand-green-min20"] and "--max-new" not in options["expand-green-min20"]
    # A cap alone selects among green's own words (min-count 1), not among expand's default (min-count 20).
    assert "--min-count-new 1 --max-new 5000 " in options["expand-green-max5k"]
    assert "--min-count-new 100 --max-new 20000 " in options["expand-green-min100-max20k"]
    compares = [line for line in plan if line.startswith("compare")]
    assert len(compares) == 2 and all(line.count("--model ") == 4 for line in compares)
    assert all("--model green-min20=" + str(tmp_path / "study") in line and "expand-green-min20 " in line for line in compares)
    for wrong in ("green-min0", "green-max5", "green-minx"):
        done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--workdir", str(tmp_path / "s"), "--variants", wrong],
                              capture_output=True, text=True, timeout=HANG_S)
        assert done.returncode == 2 and "unknown variant" in done.stderr


def test_subsets_are_written_once(tmp_path: Path) -> None:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import reproduce_ner
    finally:
        sys.path.pop(0)
    source = tmp_path / "train.tsv"
    source.write_text("a\tO\nb\tB\n\nc\tO\n\n\nd\tI\n\ne\tO\n")
    first = reproduce_ner._head_sentences(source, tmp_path / "sub", "train", 2)
    assert first.read_text() == "a\tO\nb\tB\n\nc\tO\n\n"
    stamp = first.stat().st_mtime_ns
    source.write_text("changed\tO\n")
    again = reproduce_ner._head_sentences(source, tmp_path / "sub", "train", 2)
    assert again == first and again.stat().st_mtime_ns == stamp  # its identity feeds the stages' fingerprints
    assert reproduce_ner._head_sentences(source, tmp_path / "sub", "x", None) == source


def test_the_dapt_variants_pretrain_then_fine_tune_on_the_right_tokenizers(tmp_path: Path) -> None:
    ner = tmp_path / "ner"
    (ner / "A").mkdir(parents=True)
    plan = _plan(tmp_path, "--ner", str(ner), "--sets", "A", "--seeds", "1", "--variants", "base,green,dapt,green-mlm",
                 "--dapt-steps", "500", "--green-mlm-steps", "50", "--head-warmup-fraction", "0.1")
    assert [line.split()[0] for line in plan] == ["adapt", "pretrain", "pretrain"] + ["compare"] * 2 + ["report"]
    dapt, green_mlm = (line for line in plan if line.startswith("pretrain"))
    assert f"--model {tmp_path / 'model'} " in dapt and "--max-steps 500 " in dapt and "--head-warmup-steps 50" in dapt
    assert "/expand " in green_mlm and "--max-steps 50 " in green_mlm and "--head-warmup-steps 5" in green_mlm
    compare = next(line for line in plan if line.startswith("compare"))
    # compare trains each on its own tokenizers: the mixture for a model with a domain tokenizer (green-mlm), none for DAPT
    assert "--model dapt=" in compare and "/pretrain-dapt " in compare
    assert "--model green-mlm=" in compare and "/pretrain-green-mlm " in compare


def test_gap_table_reads_scores_and_costs_from_the_run_folder(tmp_path: Path) -> None:
    import json

    sys.path.insert(0, str(SCRIPT.parent))
    import reproduce_ner

    run = tmp_path / "run"
    f1 = {"base": {1: 0.70, 2: 0.72}, "green": {1: 0.73, 2: 0.73}, "dapt": {1: 0.75, 2: 0.77}, "green-mlm": {1: 0.74}}
    for variant, seeds in f1.items():
        pool = "mean" if variant in reproduce_ner.MIXED else "general"
        for seed, value in seeds.items():
            folder = run / "finetune" / "A" / variant / f"seed-{seed}"
            folder.mkdir(parents=True)
            scores = {pool: {"f1": value}, **({"general": {"f1": 0.0}} if pool == "mean" else {})}
            (folder / "metrics.json").write_text(json.dumps({"per_seed": {str(seed): {"test": scores}}}))
    for stage, cost in {"w2v": 30.0, "align": 1.0, "expand": 1.0, "pretrain-dapt": 600.0, "pretrain-green-mlm": 200.0}.items():
        (run / stage).mkdir(parents=True)
        (run / stage / "manifest.json").write_text(json.dumps({"cost": {"wall_seconds": cost, "cpu_seconds": 2 * cost, "gpu_seconds": 0.0,
                                                                        "energy_kwh": cost / 1e5}}))

    rows = {r["variant"]: r for r in reproduce_ner.gap_table(run, ["A"], ["base", "green", "dapt", "green-mlm"], [1, 2])}
    assert rows["base"]["test_f1"] == 0.71 and rows["base"]["gap_share"] == 0.0 and rows["base"]["wall_seconds"] == 0.0
    assert rows["dapt"]["test_f1"] == 0.76 and rows["dapt"]["gap_share"] == 1.0 and rows["dapt"]["wall_seconds"] == 600.0
    assert abs(rows["green"]["gap_share"] - 0.4) < 1e-9  # (0.73 - 0.71) / (0.76 - 0.71), from the mean-pooled scores
    assert rows["green"]["wall_seconds"] == 32.0 and rows["green"]["cpu_seconds"] == 64.0
    assert rows["green-mlm"]["seeds"] == 1 and rows["green-mlm"]["wall_seconds"] == 232.0
    table = reproduce_ner.render_gap_table(list(rows.values()))
    assert "| A | green | 73.00 (2) | 40% | 32 |" in table and "| A | green-mlm | 74.00 (1) |" in table


def test_study_table_pairs_seeds_with_base_and_bootstraps_the_mean_difference(tmp_path: Path) -> None:
    import json

    sys.path.insert(0, str(SCRIPT.parent))
    import reproduce_ner

    run = tmp_path / "run"
    general = {"base": {1: 0.70, 2: 0.72, 3: 0.71}, "focus": {1: 0.69, 2: 0.70, 3: 0.68}}
    mean = {"focus": {1: 0.72, 2: 0.75, 3: 0.71}}  # differences to base: +2, +3, 0 points
    for variant, seeds in general.items():
        for seed, value in seeds.items():
            folder = run / "finetune" / "A" / variant / f"seed-{seed}"
            folder.mkdir(parents=True)
            scores = {"general": {"f1": value}}
            if variant in mean:
                scores.update(mean={"f1": mean[variant][seed]}, domain={"f1": value - 0.01})
            (folder / "metrics.json").write_text(json.dumps({"per_seed": {str(seed): {"test": scores}}}))
    rows = {r["variant"]: r for r in reproduce_ner.study_table(run, ["A"], ["base", "focus"], [1, 2, 3])}
    focus = rows["focus"]
    assert all(abs(a - b) < 1e-9 for a, b in zip(focus["paired_vs_base"]["differences"], [2.0, 3.0, 0.0], strict=True))
    assert abs(focus["paired_vs_base"]["mean"] - 5 / 3) < 1e-9
    low, high = focus["paired_vs_base"]["interval95"]
    assert -1e-9 <= low < 5 / 3 < high <= 3.0 + 1e-9  # bootstrap means of three seeds lie within their min and max
    assert abs(focus["mean"]["mean"] - 72.6667) < 1e-3 and focus["mean"]["n"] == 3 and focus["mean"]["sd"] > 0
    assert rows["base"]["domain"] is None and rows["base"]["paired_vs_base"]["mean"] == 0.0
    table = reproduce_ner.render_study_table(list(rows.values()))
    assert "| A | focus | 69.00 ± 1.00 (n=3) |" in table and "+1.67 (+2.00, +3.00, +0.00)" in table

    # --against another variant: differences to that variant's own headline (focus: mean-pooled).
    against = reproduce_ner.study_table(run, ["A"], ["base"], [1, 2, 3], against="focus")[0]
    assert against["paired_vs"] == "focus"
    assert all(abs(a - b) < 1e-9 for a, b in zip(against["paired_vs_base"]["differences"], [-2.0, -3.0, 0.0], strict=True))
    assert "Δ vs focus, paired" in reproduce_ner.render_study_table([against])


@pytest.mark.slow
def test_dense_embeddings_trains_the_table_as_one_parameter_and_finetune_lands_in_the_same_place(tmp_path: Path) -> None:
    """bench/dense_embeddings.py, the study's reference arm, trains the whole table with plain dense AdamW (no split
    module); finetune's row-wise update, dense AdamW computed lazily, ends with the same rows: those the data uses
    and those it never does (decayed alike)."""
    import json

    from finetune_helpers import build_tiny_expanded, write_ner_file
    from safetensors.torch import load_file

    model = build_tiny_expanded(tmp_path / "model", extra_rows=3)
    before = load_file(str(model / "model.safetensors"))
    key = next(k for k in before if k.endswith("word_embeddings.weight"))
    train = write_ner_file(tmp_path / "train.tsv", 16, seed=1)
    outputs, logs = {}, {}
    for arm, launcher in (("rows", ["-m", "greenadapt"]), ("dense", [str(REPO / "bench" / "dense_embeddings.py")])):
        out = tmp_path / arm
        done = subprocess.run(
            [sys.executable, *launcher, "finetune", "--task", "ner", "--train", str(train), "--model", str(model), "--epochs", "2",
             "--batch-size", "4", "--lr", "1e-2", "--seed", "1", "--device", "cpu", "--workdir", str(tmp_path / "w"),
             "--out", str(out)],
            capture_output=True, text=True, timeout=HANG_S, cwd=REPO,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        logs[arm] = done.stderr
        saved = load_file(str(next(out.rglob("model.safetensors"))))
        outputs[arm] = saved[next(k for k in saved if k.endswith("word_embeddings.weight"))]
    assert "trained row-wise" in logs["rows"] and "trained row-wise" not in logs["dense"]
    n_base = len(json.loads((model / "general-tokenizer" / "tokenizer.json").read_text())["model"]["vocab"])
    added = slice(n_base, None)
    assert not torch.equal(outputs["rows"][added], before[key][added])  # trained (and decayed)
    assert torch.allclose(outputs["rows"][added], outputs["dense"][added], atol=1e-4)
    unused = slice(before[key].shape[0] - 3, None)  # filler rows no batch uses: both decayed them the same
    assert (outputs["dense"][unused].norm(dim=1) < before[key][unused].norm(dim=1)).all()


def test_parallel_runs_give_the_same_results_as_one_by_one(tiny_bert: Path, tmp_path: Path) -> None:
    """--parallel N runs the same commands side by side: each run's scores equal the sequential run's."""
    import json

    from finetune_helpers import write_ner_file

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import reproduce_ner
    finally:
        sys.path.pop(0)
    train = write_ner_file(tmp_path / "train.tsv", 24, seed=1)
    test = write_ner_file(tmp_path / "test.tsv", 10, seed=2)

    def jobs(root: Path) -> list[tuple[list[str], Path, Path | None]]:
        return [
            (["finetune", "--task", "ner", "--train", str(train), "--test", str(test), "--model", str(tiny_bert), "--seed", str(seed),
              "--epochs", "2", "--batch-size", "4", "--lr", "1e-3", "--device", "cpu", "--workdir", str(root / "w"),
              "--out", str(root / f"seed-{seed}"), "--quiet"], root / f"seed-{seed}", None)
            for seed in (1, 2)
        ]

    runner = reproduce_ner.Runner(dry=False)
    runner.run_all(jobs(tmp_path / "one"), parallel=1)
    runner.run_all(jobs(tmp_path / "two"), parallel=2)
    for seed in (1, 2):
        one = json.loads((tmp_path / "one" / f"seed-{seed}" / "metrics.json").read_text())
        two = json.loads((tmp_path / "two" / f"seed-{seed}" / "metrics.json").read_text())
        assert one == two
        assert (tmp_path / "two" / f"seed-{seed}.log").is_file()  # side by side, each run logs to its own file
    assert json.loads((tmp_path / "one" / "seed-1" / "metrics.json").read_text()) != json.loads(
        (tmp_path / "one" / "seed-2" / "metrics.json").read_text()
    )  # the seeds differ, so equality above is not vacuous

    failing = [(["finetune", "--task", "ner", "--train", str(tmp_path / "missing.tsv"), "--model", str(tiny_bert),
                 "--out", str(tmp_path / "bad"), "--quiet"], tmp_path / "bad", None)]
    with pytest.raises(SystemExit) as stopped:
        runner.run_all(failing * 2, parallel=2)
    assert stopped.value.code != 0
