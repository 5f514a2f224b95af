"""The CPU study's amended rule (docs/study.md, "The rule, amended 2026-11-29"; bench/study_rule.py): each outcome is
reached by data made to reach it, the looks use the same seeds of both arms, and unit files that do not pair are
refused by `bench/arm_table.py --rule` in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from bench_helpers import bench_module

BENCH = Path(__file__).resolve().parent.parent / "bench"
SETS = ("NCBI-disease", "BC5CDR-disease", "BC5CDR-chem", "BC2GM")


@pytest.fixture(scope="module")
def rule():  # type: ignore[no-untyped-def]
    return bench_module("study_rule")


def scores(gains: dict[str, float], *, seeds: int = 10, sd: float = 0.3, noisy: dict[str, float] | None = None,
           rng_seed: int = 0) -> dict:
    """F1 × 100 per set, arm and seed: a set's level + the arm's gain + seeded noise (``noisy`` gives an arm its own sd)."""
    rng = np.random.default_rng(rng_seed)
    return {name: {arm: {seed: 80 + index + gain + float(rng.normal(0, (noisy or {}).get(arm, sd)))
                         for seed in range(1, seeds + 1)} for arm, gain in gains.items()}
            for index, name in enumerate(SETS)}


BASES = {"base-both": 0.0, "base-rdrop": 0.6, "green-min20": 0.2}


def test_the_levels_are_obrien_flemings_for_two_looks(rule) -> None:  # type: ignore[no-untyped-def]
    first, second = rule.nominal_levels()
    assert first == pytest.approx(0.99483, abs=2e-4) and second == pytest.approx(0.95201, abs=2e-4)  # z 2.797, 1.977
    assert rule.nominal_levels((10,)) == pytest.approx((0.95,), abs=1e-6)  # one look: the plain interval


def test_the_pooled_interval_takes_each_sets_own_level_out(rule) -> None:  # type: ignore[no-untyped-def]
    same = {"a": [1.0, 1.2, 0.8], "b": [1.1, 0.9, 1.0]}
    shifted = {"a": [11.0, 11.2, 10.8], "b": [-8.9, -9.1, -9.0]}  # the same spreads, sets far apart
    plain, fixed = rule.pooled("x", "y", same, 0.95), rule.pooled("x", "y", shifted, 0.95)
    assert fixed.sd == pytest.approx(plain.sd) and fixed.df == 4 and fixed.seeds == 3
    assert fixed.high - fixed.low == pytest.approx(plain.high - plain.low)  # the sets' levels add no width
    assert plain.estimate == pytest.approx(1.0)
    from scipy.stats import t

    assert plain.high - plain.estimate == pytest.approx(t.ppf(0.975, 4) * plain.sd / math.sqrt(6))


@pytest.mark.parametrize(("gains", "candidate", "comparator"), [
    ({**BASES, "green-both": 1.6, "green-agree": 1.0}, "green-both", "base-rdrop"),
    ({**BASES, "green-both": 1.0, "green-agree": 1.8}, "green-agree", "base-rdrop"),  # the KL helps beyond doubt
    ({**BASES, "base-both": 0.9, "green-both": 1.6, "green-agree": 1.5}, "green-both", "base-both"),  # a tie: the simpler
])
def test_the_candidate_and_comparator_are_chosen_on_the_first_two_sets(rule, gains, candidate,
                                                                       comparator) -> None:  # type: ignore[no-untyped-def]
    made = scores(gains, seeds=5, sd=0.15)
    for name in SETS[2:]:
        del made[name]  # the later sets have no numbers when the selection is made
    selection = rule.select(made)
    assert selection is not None and (selection.candidate, selection.comparator) == (candidate, comparator)
    assert selection.kl.seeds == 5 and selection.kl.level == 0.95


def test_the_rows_add_at_the_first_look(rule) -> None:  # type: ignore[no-untyped-def]
    state = rule.apply(scores({**BASES, "green-both": 1.8, "green-agree": 1.2}, seeds=5))
    q1 = state.answers["Q1"]
    assert (q1.result, q1.look, q1.final) == ("above", 5, True) and q1.interval.level == pytest.approx(0.9948, abs=1e-3)
    assert "**the rows add**" in "\n".join(rule.report(state))
    assert rule.meaning("Q3", state.answers["Q3"].result, state.selection) == "green-both becomes the default"


def test_the_regularizer_gives_it_inside_the_margin(rule) -> None:  # type: ignore[no-untyped-def]
    state = rule.apply(scores({**BASES, "green-both": 0.65, "green-agree": 0.3}, seeds=10, sd=0.1))
    q1 = state.answers["Q1"]
    assert q1.result == "not above" and q1.final and -0.5 < q1.interval.low < 0 < q1.interval.high < 0.5
    assert "**the regularizer gives it**" in "\n".join(rule.report(state))
    below = rule.apply(scores({**BASES, "green-both": -0.5, "green-agree": -0.9}, seeds=10, sd=0.2))
    assert below.answers["Q1"].result == "not above" and below.answers["Q1"].interval.high < 0  # below 0 says the same
    assert below.answers["Q3"].result == "not above"  # the default stays


def test_undecided_goes_to_the_second_look_and_ends_there(rule) -> None:  # type: ignore[no-untyped-def]
    gains = {**BASES, "base-both": -1.0, "green-both": 1.1, "green-agree": 0.5}
    made = scores(gains, seeds=10, noisy={"green-both": 1.5, "base-rdrop": 1.5})
    first = rule.apply({name: {arm: {s: f for s, f in seeds.items() if s <= 5} for arm, seeds in arms.items()}
                        for name, arms in made.items()})
    q1 = first.answers["Q1"]
    assert rule.pair("Q1", first.selection) == ("green-both", "base-rdrop")
    assert q1.look == 5 and q1.result is None and not q1.final  # the second look waits for seeds 6-10
    assert "not decided at this look" in "\n".join(rule.report(first))
    still_open = [q for q, answer in first.answers.items() if not answer.final]
    assert "Q1" in still_open and first.answers["Q2"].final  # green-both − base-both (2.1 apart) decided at once
    assert {arm for _, seed, arm in rule.plan(first) if seed > 5} == set().union(*(rule.pair(q, first.selection) for q in still_open))
    last = rule.apply(made)
    assert last.answers["Q1"].look == 10 and last.answers["Q1"].result is None and last.answers["Q1"].final
    assert "**undecided**" in "\n".join(rule.report(last))
    assert not [unit for unit in rule.plan(last) if unit[1] > 5 and unit[2] not in made[unit[0]]]  # nothing more to run


def test_a_look_needs_the_same_seeds_of_both_arms_not_the_count(rule) -> None:  # type: ignore[no-untyped-def]
    made = scores({**BASES, "green-both": 1.8, "green-agree": 1.2}, seeds=6)
    for name in SETS[2:]:
        made[name]["base-rdrop"].pop(3)  # five seeds of base-rdrop there, but not seeds 1-5
    state = rule.apply(made)
    assert state.selection is not None  # made on the first two sets, which have every seed
    assert state.answers["Q1"].interval is None and "BC5CDR-chem base-rdrop seed 3" in state.answers["Q1"].waiting
    assert state.answers["Q3"].result == "above"  # green-min20 has its seeds 1-5


def _unit(folder: Path, name: str, seed: int, arms: dict[str, float], **study: object) -> Path:
    record = {"kind": "compare", "metric": "f1",
              "options": {"test": f"/d/ner/{name}/test.tsv", "task": "ner", "epochs": 3, "batch_size": 32, "lr": 5e-05,
                          "max_length": 128, "precision": "auto", "max_steps": None, "device": "cpu", "against": next(iter(arms))},
              "variants": [{"name": arm, "headline_pool": "mean", "scores": {str(seed): {"mean": {"f1": f1 / 100}}}}
                           for arm, f1 in arms.items()],
              "study": {"commit": "c" * 40, "flags": ["avx512_bf16"], "expanded_model_sha256": "e" * 64, **study}}
    path = folder / name / f"seed-{seed}" / f"{list(arms)[-1]}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))
    return path


def test_arm_table_applies_it_to_unit_files_and_refuses_files_that_do_not_pair(tmp_path: Path) -> None:
    made = scores({**BASES, "green-both": 1.8, "green-agree": 1.2}, seeds=5)
    files = [_unit(tmp_path / "ok", name, seed, {"green-min20": arms["green-min20"][seed], arm: arms[arm][seed]})
             for name, arms in made.items() for seed in range(1, 6) for arm in ("base-both", "base-rdrop", "green-agree", "green-both")]
    table = subprocess.run([sys.executable, str(BENCH / "arm_table.py"), *map(str, files), "--rule"], capture_output=True,
                           text=True, check=True).stdout
    assert "the candidate is **green-both**" in table and "Q1 holds it against **base-rdrop**" in table
    assert "**the rows add**" in table and "**green-both becomes the default**" in table
    seed_1 = tmp_path / "ok" / "NCBI-disease" / "seed-1"
    for key, value in (("commit", "d" * 40), ("expanded_model_sha256", "f" * 64), ("precision_used", "fp32"),
                       ("base_model_sha256", "b" * 64)):
        other = _unit(tmp_path / key, "NCBI-disease", 1, {"green-min20": 80.0, "green-both": 82.0}, **{key: value})
        if key == "base_model_sha256":  # a value only one file records is not compared; two that differ are
            _unit(tmp_path / key / "b", "NCBI-disease", 1, {"green-min20": 80.0, "base-both": 79.0}, base_model_sha256="a" * 64)
        extra = [other, *(tmp_path / key / "b").rglob("*.json")]
        done = subprocess.run([sys.executable, str(BENCH / "arm_table.py"), *map(str, [*files, *extra]), "--rule"],
                              capture_output=True, text=True, check=False)
        assert done.returncode != 0, key
        said = done.stderr.strip().splitlines()
        assert len(said) == 1 and "NCBI-disease seed 1 was run with another" in said[0] and "Traceback" not in done.stderr
        assert str(seed_1) in said[0] or str(other) in said[0] or "base_model" in said[0]
    damaged = tmp_path / "damaged.json"
    damaged.write_text('{"options": {"test": "/d/ner/x/test.tsv"}, "variants": [{"name": 12345}]}')
    done = subprocess.run([sys.executable, str(BENCH / "arm_table.py"), str(damaged), "--rule"], capture_output=True,
                          text=True, check=False)
    assert done.returncode != 0 and len(done.stderr.strip().splitlines()) == 1 and str(damaged) in done.stderr


def test_arm_table_reads_the_baseline_column_against_base_where_the_files_of_a_set_name_different_ones(tmp_path: Path) -> None:
    # The study's units pair arm with arm (green-both beside base-rdrop, base-both beside green-min20): the column
    # holds differences to base where it ran, never to whichever file happened to be read first.
    files = [_unit(tmp_path, "BC2GM", 1, {"green-both": 72.0, "base-rdrop": 71.0}),
             _unit(tmp_path, "BC2GM", 1, {"base-both": 70.5, "green-min20": 70.0}),
             _unit(tmp_path, "NCBI-disease", 1, {"green-both": 81.0, "base-rdrop": 80.0}),
             _unit(tmp_path, "NCBI-disease", 1, {"base": 79.5, "green-min20": 80.5})]
    table = subprocess.run([sys.executable, str(BENCH / "arm_table.py"), *map(str, files), "--pair", "green-both:base-rdrop"],
                           capture_output=True, text=True, check=True).stdout
    rows = [line for line in table.splitlines() if line.startswith("| BC2GM |")]
    assert len(rows) == 4 and all(row.endswith("| no base run on this set (the pairs below) |") for row in rows)
    assert "| green-both − base-rdrop | +1.00; 1/1 above (+1.00) | +1.00; 1/1 above (+1.00) |" in table
    assert "| NCBI-disease | base | 1 | — | — | 79.50 | — |" in table
    assert "| NCBI-disease | green-both | 1 | — | — | 81.00 | +1.50; 1/1 above (+1.50) |" in table
    same = [_unit(tmp_path / "same", "BC2GM", 1, {"green-min20": 70.0, arm: f1}) for arm, f1 in (("green-both", 72.0), ("base-both", 70.5))]
    table = subprocess.run([sys.executable, str(BENCH / "arm_table.py"), *map(str, same)], capture_output=True, text=True,
                           check=True).stdout
    assert "| BC2GM | green-min20 | 1 |" in table and "| BC2GM | green-both | 1 | — | — | 72.00 | +2.00; 1/1 above (+2.00) |" in table


def test_power_and_cost_are_what_the_amendment_states(rule) -> None:  # type: ignore[no-untyped-def]
    assert rule.fixed_seeds_for_power(0.5, 0.58) == 4 and rule.fixed_seeds_for_power(0.5, 1.41) == 17
    chances = rule.simulate(0.5, 0.58, runs=4000)
    assert chances["above"] > 0.99 and chances["undecided"] < 0.01
    tie = rule.simulate(0.0, 0.58, runs=4000)
    assert tie["above"] < 0.05 and tie["not above"] > 0.9  # a true tie: "not above", no coin flip
    assert rule.cost(()) == pytest.approx(0.39, abs=0.01) and rule.cost(("Q1", "Q2", "Q3")) == pytest.approx(0.74, abs=0.01)
