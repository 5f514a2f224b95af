"""`greenadapt report`: discovery, cost chains, results grouped over seeds, Markdown/JSON/HTML, bad input."""

from __future__ import annotations

import base64
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_S

from greenadapt.artifacts.manifest import manifest_identity
from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.stage import StageRun
from greenadapt.errors import EXIT_STAGE_CONFLICT, StageError
from greenadapt.reporting import collect, markdown, write_html
from greenadapt.reporting.paper import LB_TO_KG

# F1 per variant and seed, per pooling mode, as a finetune run's metrics.json holds them.
SCORES = {
    "base": {1: {"general": 0.70}, 2: {"general": 0.74}},
    "green": {
        1: {"general": 0.71, "domain": 0.69, "mean": 0.75},
        2: {"general": 0.73, "domain": 0.70, "mean": 0.77},
    },
}


def _stage(kind: str, out: Path, config: dict[str, Any], inputs: list[dict[str, Any]], files: dict[str, Any],
           stats: dict[str, Any]) -> dict[str, Any]:
    with StageRun(kind, out, config, inputs) as run:
        for name, content in files.items():
            path = run.tmp / name
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, str):
                path.write_text(content)
            else:
                write_json(path, content)
        return run.commit(stats=stats)


def make_run(root: Path) -> Path:
    """A workspace run folder like the reproduction study writes, made through StageRun."""
    run = root / "corpus" / "minilm"
    w2v = _stage("w2v", run / "w2v", {"dim": 8}, [{"path": "corpus.txt"}], {"vectors.txt": "x"}, {"n_words": 100})
    neighbours = [{"word": "kappab", "kind": "frequent", "count": 7, "in_w2v": True, "within": [["kappa", 0.9]], "cross": [["ka", 0.4]]}]
    report = {"method": "lstsq", "heldout_cosine": 0.61, "train_cosine": 0.7, "n_shared": 50, "n_new": 40, "neighbours": neighbours}
    align = _stage(
        "align", run / "align", {"method": "lstsq"}, [manifest_identity(run / "w2v", w2v)],
        {"report.json": report}, {k: v for k, v in report.items() if k != "neighbours"},
    )
    _stage("expand", run / "expand", {"seed": 1}, [manifest_identity(run / "align", align)], {"model.bin": "m"}, {"n_new": 40})
    for variant, seeds in SCORES.items():
        for seed, pools in seeds.items():
            per_seed = {str(seed): {"test": {pool: {"f1": f1, "precision": f1} for pool, f1 in pools.items()}}}
            log = "".join(json.dumps({"step": s, "epoch": 1, "loss": 1.0 / s}) + "\n" for s in range(1, 21))
            log += json.dumps({"event": "dev", "epoch": 1, "step": 20, "score": 0.5}) + "\n"
            _stage(
                "finetune",
                run / "finetune" / "ncbi" / variant / f"seed-{seed}",
                {"task": {"task": "ner"}, "train": {"mix": 0.0 if variant == "base" else 0.5}, "seeds": [seed], "model": variant},
                [{"role": "train", "path": "train.tsv"}],
                {"metrics.json": {"seeds": [seed], "primary_metric": "f1", "per_seed": per_seed}, "train_log.jsonl": log},
                {"task": "ner", "mix": 0.0 if variant == "base" else 0.5, "models": {str(seed): "."}},
            )
    return run


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("report"))


def test_collect_finds_every_stage_in_pipeline_order(run_folder: Path) -> None:
    data = collect([run_folder])
    kinds = [s["kind"] for s in data["stages"]]
    assert kinds == ["w2v", "align", "expand"] + ["finetune"] * 4
    assert all(s["cost"]["energy_kwh"] > 0 for s in data["stages"])


def test_adaptation_cost_sums_its_chain_and_sits_beside_the_paper(run_folder: Path) -> None:
    data = collect([run_folder])
    (chain,) = data["adaptation"]
    assert chain["complete"] and chain["method"] == "lstsq"
    assert chain["stages"] == ["minilm/w2v", "minilm/align", "minilm/expand"]
    parts = [s["cost"] for s in data["stages"][:3]]
    assert chain["energy_kwh"] == pytest.approx(sum(p["energy_kwh"] for p in parts))
    assert chain["wall_seconds"] == pytest.approx(sum(p["wall_seconds"] for p in parts))
    published = {p["name"]: p for p in data["paper"]["published"]}
    green = published["GreenBioBERT (paper)"]
    assert green["device_hours"] == 144 and green["co2_kg"] == pytest.approx(28 * LB_TO_KG)
    assert published["BioBERT v1.0 (paper)"]["co2_kg"] == pytest.approx(544 * 0.45359237)
    assert published["BioBERT v1.1 (paper)"]["wall_hours"] is None  # not in the notes: not made up
    ratio = next(r for r in data["paper"]["ratios"] if r["reference"] == "GreenBioBERT (paper)")
    assert ratio["wall_ratio"] == pytest.approx(chain["wall_hours"] / 12)


def test_results_group_seeds_and_report_each_pooling_mode(run_folder: Path) -> None:
    rows = {(r["group"], r["pool"]): r for r in collect([run_folder])["results"]}
    assert set(rows) == {
        ("minilm/finetune/ncbi/base", "general"),
        ("minilm/finetune/ncbi/green", "general"),
        ("minilm/finetune/ncbi/green", "domain"),
        ("minilm/finetune/ncbi/green", "mean"),
    }
    for (group, pool), row in rows.items():
        values = [SCORES[group.rsplit("/", 1)[1]][seed][pool] for seed in (1, 2)]
        assert row["n"] == 2 and row["seeds"] == ["1", "2"] and row["split"] == "test"
        assert row["mean"] == pytest.approx(statistics.mean(values))
        assert row["std"] == pytest.approx(statistics.stdev(values))


def test_training_curves_are_read_from_the_logs(run_folder: Path) -> None:
    curves = collect([run_folder])["training"]
    assert len(curves) == 4
    curve = curves[0]
    assert [p[0] for p in curve["loss"]] == list(range(1, 21)) and curve["loss"][1][1] == pytest.approx(0.5)
    assert curve["dev"] == [[20, 0.5]]


def test_markdown_summary(run_folder: Path) -> None:
    text = markdown(collect([run_folder]))
    assert "## Stages and their cost" in text and "| minilm/w2v | w2v |" in text
    assert "GreenBioBERT (paper)" in text and "Findings of EMNLP" in text
    # Numbers a person reads: no scientific notation, no file the reader does not have, one unit system
    # (kg, not lbs), each energy and CO₂ figure in the unit its size reads best in.
    assert not re.search(r"\d[eE][-+]\d", text) and "DESIGN-NOTES" not in text and "lbs" not in text
    assert re.search(r"\| \d[\d.,]* (Wh|kWh|MWh) \| \d[\d.,]* (g|kg|t) \|", text)
    assert re.search(r"\| minilm/finetune/ncbi/green \| ner \| 0\.5 \| test \| mean \| f1 \| 76\.00 ± 1\.41 \(n=2\) \| 1,2 \|", text)
    assert "| minilm/align | lstsq | 0.61 |" in text


def test_html_is_self_contained_with_decodable_pngs(run_folder: Path, tmp_path: Path) -> None:
    out = write_html(collect([run_folder]), tmp_path / "sub" / "report.html")
    page = out.read_text(encoding="utf-8")
    images = re.findall(r'<img alt="[^"]*" src="data:image/png;base64,([A-Za-z0-9+/=]+)">', page)
    # cost chart, one results chart (ner, test), accuracy against adaptation cost (two configurations),
    # and one curve chart for the data set (base and green together)
    assert len(images) == 1 + 1 + 1 + 1
    for data in images:
        assert base64.b64decode(data)[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere
    assert "kappab" in page and "GreenBioBERT" in page
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]  # no temporary left behind


def test_a_manifest_from_before_energy_accounting_gets_an_estimate(tmp_path: Path) -> None:
    folder = tmp_path / "old"
    folder.mkdir()
    legacy = {"kind": "w2v", "files": {}, "cost": {"wall_seconds": 3600, "cpu_seconds": 7200, "peak_rss_mib": 1024}}
    (folder / "manifest.json").write_text(json.dumps(legacy))
    (stage,) = collect([folder])["stages"]
    assert stage["cost"]["energy_kwh"] == pytest.approx(7200 * 10 / 3.6e6 + 3600 * 0.3725 / 3.6e6)
    assert stage["cost"]["energy_method"].startswith("tdp-estimate (made by the reader")
    assert stage["cost"]["co2_kg"] is None


def test_bad_inputs_are_stage_errors(tmp_path: Path) -> None:
    with pytest.raises(StageError, match="no such folder"):
        collect([tmp_path / "missing"])
    (tmp_path / "file.txt").write_text("x")
    with pytest.raises(StageError, match="not a folder"):
        collect([tmp_path / "file.txt"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(StageError, match="not a greenadapt run folder"):
        collect([tmp_path / "empty"])
    garbled = tmp_path / "garbled" / "w2v"
    garbled.mkdir(parents=True)
    (garbled / "manifest.json").write_text('{"kind": "w2v",\n "cost": {oops}\n}')
    with pytest.raises(StageError) as info:
        collect([tmp_path / "garbled"])
    assert info.value.line == 2 and str(garbled / "manifest.json") in info.value.one_line()
    (garbled / "manifest.json").write_text("[1, 2]")
    with pytest.raises(StageError, match="no 'kind'"):
        collect([tmp_path / "garbled"])


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greenadapt", *args], capture_output=True, text=True, timeout=HANG_S)


def test_cli_json_and_one_line_errors(run_folder: Path, tmp_path: Path) -> None:
    done = _cli("report", str(run_folder), "--json", "--quiet")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {"stages", "adaptation", "alignment", "training", "results", "paper"} <= set(data)
    bad = tmp_path / "run" / "align"
    bad.mkdir(parents=True)
    (bad / "manifest.json").write_bytes(b"\xff\xfe garbage")
    failed = _cli("report", str(tmp_path / "run"))
    assert failed.returncode == EXIT_STAGE_CONFLICT
    assert failed.stderr.count("\n") == 1 and "Traceback" not in failed.stderr
    assert failed.stderr.startswith(f"error: {bad / 'manifest.json'}: garbled manifest")


def test_qa_metrics_shapes_are_read(tmp_path: Path) -> None:
    run = tmp_path / "qa-runs"
    flat = {"exact_match": 0.3, "f1": 0.55, "questions": 10, "gold_offsets": {"checked": 10, "repaired": 0}, "pool": "mean"}
    _stage("qa", run / "answer", {"pool": "mean"}, [], {"metrics.json": flat}, {"f1": 0.55})
    nested = {"primary_metric": "f1", "pool": "general", "dev": {"exact_match": 0.2, "f1": 0.4}}
    _stage("finetune", run / "squad", {"train": {"seed": 7}}, [], {"metrics.json": nested}, {"task": "qa"})
    rows = {(r["group"], r["split"], r["pool"]): r for r in collect([run])["results"]}
    assert set(rows) == {("qa-runs/answer", "eval", "mean"), ("qa-runs/squad", "dev", "general")}
    assert rows[("qa-runs/answer", "eval", "mean")]["mean"] == pytest.approx(0.55)
    assert rows[("qa-runs/squad", "dev", "general")]["seeds"] == ["7"]


def test_pretrain_stages_get_their_held_out_losses_a_curve_and_a_row_beside_the_paper(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    evaluations = [
        {"step": 0, "domain": {"loss": 10.94, "perplexity": 56410.3}, "general": {"loss": 10.5, "perplexity": 36315.5}},
        {"step": 300, "domain": {"loss": 5.4714, "perplexity": 237.8}, "general": {"loss": 6.25, "perplexity": 518.0}},
    ]
    log = "".join(json.dumps({"step": s, "epoch": 1, "loss": 10.0 / s, **({"head_only": True} if s <= 30 else {})}) + "\n"
                  for s in range(1, 301))
    log += json.dumps({"event": "eval", **evaluations[-1]}) + "\n"
    _stage(
        "pretrain", run / "pretrain-dapt",
        {"model": "minilm", "tokenizer": "general", "gmap": None, "train": {"seed": 1, "head_warmup_steps": 30}},
        [{"role": "corpus", "path": "corpus.txt"}], {"train_log.jsonl": log},
        {"steps": 300, "tokens_trained": 1_228_800, "tokens_per_second": 1972.1, "processes": 1, "device": "cpu", "tokenizer": "general",
         "evaluations": evaluations, "heldout_before": evaluations[0], "heldout_after": evaluations[-1]},
    )
    data = collect([run])
    (row,) = data["pretraining"]
    assert row["steps"] == 300 and row["tokens"] == 1_228_800 and row["head_warmup_steps"] == 30
    assert row["heldout"]["domain"] == {"loss_before": 10.94, "loss_after": 5.4714, "perplexity_before": 56410.3, "perplexity_after": 237.8}
    assert row["heldout"]["general"]["loss_after"] == 6.25
    stage_cost = next(s["cost"] for s in data["stages"] if s["kind"] == "pretrain")
    dapt = next(o for o in data["paper"]["ours"] if "continued masked-LM pretraining, 300 steps" in o["name"])
    assert dapt["device"] == "CPU core" and dapt["device_hours"] == pytest.approx(stage_cost["cpu_hours"])
    assert dapt["wall_hours"] == pytest.approx(stage_cost["wall_seconds"] / 3600)
    curve = next(c for c in data["training"] if c["name"].endswith("pretrain-dapt"))
    assert len(curve["loss"]) == 300 and curve["loss"][-1] == [300, pytest.approx(10.0 / 300)]
    text = markdown(data)
    assert "## Masked-LM pretraining" in text
    assert ("| minilm/pretrain-dapt | minilm (tokenizer general, head warm-up 30) | 300 | 1,228,800 | 10.94 → 5.471 "
            "| 56,410 → 238 | 10.5 → 6.25 |") in text
    page = write_html(data, tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<h2>Masked-LM pretraining</h2>" in page and "10.94 → 5.471" in page


def test_accuracy_against_cost_follows_each_model_to_the_stages_that_made_it(tmp_path: Path) -> None:
    from greenadapt.artifacts.manifest import load_stage
    from greenadapt.reporting.plots import accuracy_cost_chart

    run = make_run(tmp_path)
    expand = run / "expand"
    chain = [load_stage(run / kind, kind)["cost"]["cpu_seconds"] for kind in ("w2v", "align", "expand")]
    for seed, f1 in ((1, 0.80), (2, 0.84)):
        per_seed = {str(seed): {"test": {"general": {"f1": f1 - 0.1}, "mean": {"f1": f1}}}}
        _stage(
            "finetune", run / "finetune" / "ncbi" / "linked" / f"seed-{seed}",
            {"task": {"task": "ner"}, "train": {"mix": 0.5}, "seeds": [seed], "model": "expanded"},
            [manifest_identity(expand, load_stage(expand, "expand")), {"role": "train", "path": "train.tsv"}],
            {"metrics.json": {"seeds": [seed], "primary_metric": "f1", "per_seed": per_seed}},
            {"task": "ner", "mix": 0.5, "models": {str(seed): "."}},
        )
    # A fine-tuning of a continued-pretraining output: the model is recorded as a model folder (no "stage"
    # key), yet its cost is the pretraining's (DAPT once appeared free in the chart).
    dapt = _stage("pretrain", run / "pretrain-dapt", {"train": {"seed": 1}}, [{"role": "corpus", "path": "corpus.txt"}],
                  {"model.bin": "m"}, {"steps": 10})
    _stage(
        "finetune", run / "finetune" / "ncbi" / "dapt" / "seed-1",
        {"task": {"task": "ner"}, "train": {"mix": 0.0}, "seeds": [1], "model": "dapt"},
        [{"model": str(run / "pretrain-dapt"), "path": str(run / "pretrain-dapt"), "files_digest": "x"},
         {"role": "train", "path": "train.tsv"}],
        {"metrics.json": {"seeds": [1], "primary_metric": "f1", "per_seed": {"1": {"test": {"general": {"f1": 0.81}}}}}},
        {"task": "ner", "mix": 0.0, "models": {"1": "."}},
    )
    rows = {r["group"].rsplit("/", 1)[1]: r for r in collect([run])["accuracy_vs_cost"]}
    assert rows["dapt"]["cpu_hours"] == pytest.approx(dapt["cost"]["cpu_seconds"] / 3600) and rows["dapt"]["cpu_hours"] > 0
    linked, base = rows["linked"], rows["base"]
    assert linked["pool"] == "mean" and linked["n"] == 2 and linked["mean"] == pytest.approx(0.82)
    assert linked["cpu_hours"] == pytest.approx(sum(chain) / 3600)  # w2v + align + expand, each once
    assert base["pool"] == "general" and base["cpu_hours"] == 0.0  # no stage made the base model
    png = accuracy_cost_chart(list(rows.values()))
    assert png is not None and png.startswith(b"\x89PNG")
    page = tmp_path / "report.html"
    from greenadapt.reporting import write_html

    write_html(collect([run]), page)
    assert "Accuracy against adaptation cost" in page.read_text()


def test_quantities_take_the_unit_their_size_reads_best_in() -> None:
    from greenadapt.reporting.render import _co2, _energy, _num

    assert [_energy(v) for v in (0.0000123, 0.0123, 1.5, 2500)] == ["0.0123 Wh", "12.3 Wh", "1.5 kWh", "2.5 MWh"]
    assert [_co2(v) for v in (0.0004, 0.25, 12.0, 3400)] == ["0.4 g", "250 g", "12 kg", "3.4 t"]
    assert [_num(v) for v in (0.000123, 12.345, 1234.5, 7)] == ["0.000123", "12.3", "1,234", "7"]
    assert _energy(None) == _co2("n/a") == "—"


def test_durations_and_chart_axes_take_the_unit_their_size_reads_best_in() -> None:
    from greenadapt.reporting.plots import ENERGY_UNITS, TIME_UNITS, axis_unit
    from greenadapt.reporting.render import _duration

    assert [_duration(v) for v in (0.0031, 4.25, 45, 600, 3 * 3600, 5 * 86400)] == ["0.0031 s", "4.2 s", "45 s", "10.0 min", "3.0 h",
                                                                                    "5.0 days"]
    assert axis_unit([0.00001, 0.000017], ENERGY_UNITS) == ("mWh", 1e6)  # 17 mWh, not 1.7e-5 kWh
    assert axis_unit([0.2, 3.0], ENERGY_UNITS) == ("kWh", 1.0)
    assert axis_unit([0.004], TIME_UNITS) == ("ms", 1e3)
    assert axis_unit([30.0, 400.0], TIME_UNITS)[0] == "min"
    assert axis_unit([2e5], TIME_UNITS)[0] == "days"


def test_the_energy_label_reaches_the_tables(tmp_path: Path) -> None:
    from greenadapt.reporting.render import comparison_table, stage_table

    data = collect([make_run(tmp_path / "run")])
    head, rows = stage_table(data)
    column = head.index("energy from")
    assert all(row[column].startswith("estimated (tdp-estimate) @ ") for row in rows)
    ours = data["paper"]["ours"]
    assert ours and all(r["energy_label"] == "estimated" for r in ours)
    head, rows = comparison_table(data)
    assert any(row[head.index("energy")].endswith("(estimated)") for row in rows)
    # A manifest from before the label: read from its method, never called a measurement unless it is one.
    assert collect_label({"energy_method": "rapl+tdp-estimate", "wall_seconds": 1.0, "energy_kwh": 0.1}) == "partly measured"
    assert collect_label({"energy_method": "rapl", "wall_seconds": 1.0, "energy_kwh": 0.1}) == "measured"


def collect_label(cost: dict[str, Any]) -> str:
    from greenadapt.machine.energy import cost_of

    return cost_of({"cost": cost})["energy_label"]


def test_a_single_seed_bar_has_no_error_bar_and_says_n_1() -> None:
    from greenadapt.reporting.plots import results_figure

    rows = [
        {"group": "base", "pool": "mean", "mean": 0.80, "std": 0.0, "n": 1, "metric": "f1"},
        {"group": "green", "pool": "mean", "mean": 0.82, "std": 0.01, "n": 3, "metric": "f1"},
    ]
    ax = results_figure(rows, "ncbi").axes[0]
    assert [t.get_text() for t in ax.texts] == ["n=1"]  # only the single-seed bar
    assert abs(ax.texts[0].xy[1] - 80.0) < 1e-9
    error_bars = [c for c in ax.containers if type(c).__name__ == "ErrorbarContainer"]
    assert len(error_bars) == 1
    assert results_figure([], "x") is None


def test_cost_growth_is_drawn_where_runs_of_several_sizes_exist(tmp_path: Path) -> None:
    """w2v runs of three corpus sizes (same epochs) give a curve ordered by size; one size alone gives none."""
    from greenadapt.reporting.plots import growth_chart

    sizes = {"small": 1_000, "large": 100_000, "mid": 10_000}
    for name, tokens in sizes.items():
        _stage("w2v", tmp_path / "runs" / name / "w2v", {"dim": 8, "epochs": 5}, [{"path": f"{name}.txt"}], {"v.txt": "x"},
               {"tokens": tokens})
    _stage("w2v", tmp_path / "runs" / "other" / "w2v", {"dim": 8, "epochs": 1}, [{"path": "o.txt"}], {"v.txt": "x"}, {"tokens": 5_000})
    data = collect([tmp_path / "runs"])
    [series] = data["growth"]  # the 1-epoch run has no size to compare with: no curve of its own
    assert series["label"] == "w2v (5 epochs)" and series["size"] == "corpus tokens"
    assert [p[0] for p in series["points"]] == [1_000, 10_000, 100_000]
    assert all(isinstance(p[1], float) and p[1] >= 0 for p in series["points"])
    png = growth_chart(data["growth"])
    assert png is not None and png.startswith(b"\x89PNG")
    page = tmp_path / "report.html"
    write_html(data, page)
    assert "How cost grows" in page.read_text()
    assert collect([tmp_path / "runs" / "small"])["growth"] == [] and growth_chart([]) is None
    from greenadapt.reporting.plots import count_label

    assert [count_label(v) for v in (999, 23_640, 559_757, 1_702_382, 1_000_000, 1.05e9)] == ["999", "24k", "560k", "1.7M", "1M", "1.1B"]


def make_compare(folder: Path) -> Path:
    """A compare folder's compare.json as `greenadapt compare` writes it, from constructed per-example results."""
    import numpy as np

    from greenadapt.comparison.statistics import Contributions, compare_pair

    def accuracy(correct: list[int]) -> Contributions:
        return Contributions(np.array([[c, 1] for c in correct]), lambda sums: float(sums[0]) / float(sums[1]))

    base = [1] * 700 + [0] * 300
    green = [1] * 790 + [0] * 210
    tie = [1] * 701 + [0] * 299
    scores = {1: (0.79, 0.70), 2: (0.80, 0.71)}
    pairs = [compare_pair("green", "base", "f1", scores, {s: (accuracy(green), accuracy(base)) for s in (1, 2)}, replicates=300),
             compare_pair("green-min20", "base", "f1", {1: (0.701, 0.70), 2: (0.70, 0.71)},
                          {s: (accuracy(tie), accuracy(base)) for s in (1, 2)}, replicates=300)]
    variants = []
    for name, pool, values in (("base", "general", (0.70, 0.71)), ("green", "mean", (0.79, 0.80)), ("green-min20", "mean", (0.701, 0.70))):
        per_seed = {str(s): {pool: {"f1": v}} for s, v in zip((1, 2), values, strict=True)}
        variants.append({"name": name, "model": f"models/{name}", "headline_pool": pool, "scores": per_seed,
                         "summary": {pool: {"mean": float(np.mean(values)), "sd": float(np.std(values, ddof=1)), "n": 2}},
                         "finetune_cost": {"cpu_seconds": 7200.0, "energy_kwh": 0.05},
                         "adaptation_cost": {"cpu_seconds": 900.0, "energy_kwh": 0.01} if name != "base" else {}})
    document = {"format": 1, "kind": "compare", "options": {"comparator": None}, "metric": "f1", "variants": variants,
                "pairs": [p.to_json() | {"verdict": p.verdict(unit="F1")} for p in pairs], "share_of_comparator_gain": {}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "compare.json").write_text(json.dumps(document))
    return folder


def test_a_compare_folder_gets_its_verdicts_intervals_and_a_forest_plot(tmp_path: Path) -> None:
    from greenadapt.reporting import markdown, render_html

    compare = make_compare(tmp_path / "cmp")
    nested = make_compare(tmp_path / "study" / "finetune" / "NCBI-disease")  # the study script's place for it
    assert len(collect([tmp_path / "study"])["comparisons"]) == 1
    data = collect([make_run(tmp_path / "run"), compare])
    (found,) = data["comparisons"]
    assert nested.is_dir() and found["path"] == str(compare) and [p["variant"] for p in found["pairs"]] == ["green", "green-min20"]
    text = markdown(data)
    assert "green vs base: +9.00 F1 [" in text and "green-min20 vs base: " in text and "not significant at 95%" in text
    page = render_html(data)
    assert "Did it help?" in page and 'alt="paired differences in f1 with 95% intervals"' in page
    assert page.count("significant at 95%") >= 2 and "How to read it" in page


def test_every_view_of_a_comparison_carries_its_notes_beside_the_verdict(tmp_path: Path) -> None:
    """Issue 65, point 2: a null result that is "not a verdict" says so in the HTML and Markdown as on the terminal."""
    from greenadapt.reporting import markdown, render_html

    compare = make_compare(tmp_path / "cmp")
    document = json.loads((compare / "compare.json").read_text())
    note = "not a verdict: base learned nothing on seed 1 (no entity predicted)"
    document["pairs"][0]["notes"].append(note)
    (compare / "compare.json").write_text(json.dumps(document))
    data = collect([compare])
    text = markdown(data)
    assert f"- {document['pairs'][0]['verdict']}\n  - {note}" in text
    assert note in render_html(data)


def test_the_forest_plot_always_shows_zero() -> None:
    """A one-point gain drawn beside 0, not on an axis clipped to the scores (the bar chart's fault in issue 34)."""
    from greenadapt.reporting import plots

    pair = {"variant": "green", "baseline": "base", "mean": 0.011, "seed_interval95": None, "bootstrap_interval95": [0.004, 0.018],
            "significant95": True}
    fig_png = plots.forest_plot([pair], "f1")
    assert fig_png is not None and fig_png.startswith(b"\x89PNG")
    assert plots.forest_plot([], "f1") is None
