"""The CPU study's rule as amended on 2026-11-29 (docs/study.md, "The rule, amended"): pooled, powered, sequential.

For a contrast A − B the data are the paired per-seed differences d[s][i] = F1_A − F1_B (× 100) on set s and seed i.
The model is d = μ_s + ε with the set a fixed effect and one within-set sd; the pooled effect is the mean of the four
μ_s, estimated by the mean of the set means, with the standard error of the pooled within-set sd (df = N − S) and a
Student-t interval. The rule looks only at seeds 1-5 and 1-10 of every set (fixed in advance), each look with the
O'Brien–Fleming interval for two looks (99.48% at the first, 95.20% at the second: an overall 5% chance of a false
"above 0" however many looks are taken), and decides:

- which adapted arm is the candidate, and which unadapted arm a user would run instead, on the first two sets' seeds
  1-5 (``select``);
- Q1 candidate − the better unadapted arm, Q2 candidate − its control at equal exposure, Q3 candidate − green-min20,
  each "above" (interval above 0), "not above" (interval inside ±0.5 F1, or below 0), or undecided (``apply``);
- which arm still runs on which set and seed: an arm that no open question uses runs no more seeds (``arms_needed``).

    python bench/study_rule.py power     # the power table written beside the rule (Monte Carlo, seeded)
    python bench/study_rule.py cost      # the plan's work against the 2026-11-27 plan's, by what stays open
    python bench/study_rule.py levels    # each look's interval level
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SETS = ("NCBI-disease", "BC5CDR-disease", "BC5CDR-chem", "BC2GM")
SELECTION_SETS = SETS[:2]
LOOKS = (5, 10)  # seeds per set at which the rule looks, and at no other count
MARGIN = 0.5  # F1 × 100: an interval inside ±MARGIN is "no gain worth having" (the equivalence test)
ALPHA = 0.05  # the chance, over both looks, of calling a zero difference "above 0" (or below)
SELECTION_LEVEL = 0.95
DEFAULT_ARM = "green-min20"
BASELINE = "base"  # the unadapted model, one view: what the table's Δ column is read against where it ran
CONTROL = {"green-both": "base-both", "green-agree": "base-rdrop"}  # each candidate's control at equal exposure
SELECTION_ARMS = ("green-both", "green-agree", "base-both", "base-rdrop")
# The forward passes one training example costs an arm: what a run of it costs against a one-view run.
PASSES = {"base": 1, "green-min20": 1, "base-both": 2, "base-rdrop": 2, "green-both": 2, "green-agree": 2}

Scores = Mapping[str, Mapping[str, Mapping[int, float]]]  # set -> arm -> seed -> headline F1 × 100


@dataclass(frozen=True)
class Pooled:
    """A pooled paired difference A − B over sets (a fixed effect each) and seeds, with its interval."""

    arm: str
    other: str
    estimate: float
    low: float
    high: float
    sd: float
    df: int
    seeds: int  # per set
    level: float

    def words(self) -> str:
        return (f"{self.arm} − {self.other}: {self.estimate:+.2f} [{self.low:+.2f}, {self.high:+.2f}] "
                f"({self.level:.2%} interval; {self.seeds} seeds a set, within-set sd {self.sd:.2f}, df {self.df})")


def nominal_levels(looks: Sequence[int] = LOOKS, alpha: float = ALPHA) -> tuple[float, ...]:
    """Each look's two-sided confidence level under O'Brien–Fleming: z boundaries c·sqrt(n_K / n_k), with c such that
    a true zero crosses one of them with chance ``alpha`` (the looks' z statistics correlate as sqrt(n_j / n_k))."""
    import numpy as np
    from scipy.stats import multivariate_normal, norm

    info = np.asarray(looks, dtype=np.float64) / looks[-1]
    cov = np.sqrt(np.minimum.outer(info, info) / np.maximum.outer(info, info))
    box = multivariate_normal(mean=np.zeros(len(looks)), cov=cov, seed=0)

    def crossing(c: float) -> float:
        bound = c / np.sqrt(info)
        return float(1 - box.cdf(bound, lower_limit=-bound))

    low, high = 1.0, 6.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if crossing(middle) > alpha else (low, middle)
    return tuple(float(1 - 2 * norm.sf(high / math.sqrt(i))) for i in info)


def pooled(arm: str, other: str, differences: Mapping[str, Sequence[float]], level: float) -> Pooled:
    """The pooled difference over sets (each a fixed effect: its own mean removed) and its Student-t interval."""
    from scipy.stats import t

    means = {name: sum(values) / len(values) for name, values in differences.items()}
    count = sum(len(values) for values in differences.values())
    df = count - len(differences)
    if df < 1:
        raise ValueError("a pooled interval needs two seeds on at least one set")
    squares = sum((d - means[name]) ** 2 for name, values in differences.items() for d in values)
    sd = math.sqrt(squares / df)
    error = sd / len(differences) * math.sqrt(sum(1 / len(values) for values in differences.values()))
    estimate = sum(means.values()) / len(means)
    half = float(t.ppf(0.5 + level / 2, df)) * error
    seeds = min(len(values) for values in differences.values())
    return Pooled(arm, other, estimate, estimate - half, estimate + half, sd, df, seeds, level)


def differences(scores: Scores, arm: str, other: str, sets: Sequence[str], seeds: Sequence[int]) -> dict[str, list[float]] | None:
    """Per set, ``arm − other`` on exactly these seeds; None while any of them is missing (the same seeds, not counts)."""
    found = {}
    for name in sets:
        mine, theirs = scores.get(name, {}).get(arm, {}), scores.get(name, {}).get(other, {})
        if any(seed not in mine or seed not in theirs for seed in seeds):
            return None
        found[name] = [mine[seed] - theirs[seed] for seed in seeds]
    return found


def missing_cells(scores: Scores, arms: Sequence[str], sets: Sequence[str], seeds: Sequence[int]) -> list[str]:
    return [f"{name} {arm} seed {seed}" for name in sets for arm in arms for seed in seeds
            if seed not in scores.get(name, {}).get(arm, {})]


def outcome(interval: Pooled, margin: float = MARGIN) -> str | None:
    """"above" when the interval lies above 0; "not above" when it lies below 0 or inside ±margin; else None."""
    if interval.low > 0:
        return "above"
    if interval.high < 0 or (interval.low > -margin and interval.high < margin):
        return "not above"
    return None


@dataclass(frozen=True)
class Selection:
    candidate: str
    comparator: str  # the better unadapted arm, what Q1 holds the candidate against
    kl: Pooled  # green-agree − green-both on the selection sets
    exposure: Pooled  # base-both − base-rdrop on the selection sets

    @property
    def control(self) -> str:
        return CONTROL[self.candidate]


def select(scores: Scores) -> Selection | None:
    """On the first two sets' seeds 1-5: green-agree is the candidate only if its 95% interval over green-both lies
    above 0 (the KL helps); otherwise green-both (the simpler and cheaper arm wins ties). The unadapted arm Q1 holds it
    against is base-both if its pooled mean is above base-rdrop's, else base-rdrop."""
    seeds = range(1, LOOKS[0] + 1)
    kl = differences(scores, "green-agree", "green-both", SELECTION_SETS, seeds)
    exposure = differences(scores, "base-both", "base-rdrop", SELECTION_SETS, seeds)
    if kl is None or exposure is None:
        return None
    kl_interval = pooled("green-agree", "green-both", kl, SELECTION_LEVEL)
    exposure_interval = pooled("base-both", "base-rdrop", exposure, SELECTION_LEVEL)
    return Selection(candidate="green-agree" if kl_interval.low > 0 else "green-both",
                     comparator="base-both" if exposure_interval.estimate > 0 else "base-rdrop",
                     kl=kl_interval, exposure=exposure_interval)


QUESTIONS = ("Q1", "Q2", "Q3")
TITLES = {"Q1": "the product's claim: the candidate against the better unadapted arm",
          "Q2": "exposure matched: the candidate against its own control",
          "Q3": "the default: the candidate against green-min20"}


def pair(question: str, selection: Selection) -> tuple[str, str]:
    other = {"Q1": selection.comparator, "Q2": selection.control, "Q3": DEFAULT_ARM}[question]
    return selection.candidate, other


def meaning(question: str, result: str | None, selection: Selection) -> str:
    if result is None:
        return "undecided"
    return {("Q1", "above"): "the rows add", ("Q1", "not above"): "the regularizer gives it",
            ("Q2", "above"): "the rows add at equal exposure",
            ("Q2", "not above"): "at equal exposure the rows add nothing worth having",
            ("Q3", "above"): f"{selection.candidate} becomes the default",
            ("Q3", "not above"): "the default stays"}[(question, result)]


@dataclass
class Answer:
    question: str
    look: int | None = None  # seeds a set of the look that decided it, or of the last look taken
    interval: Pooled | None = None
    result: str | None = None  # "above", "not above", or None (undecided, or not looked at yet)
    final: bool = False
    waiting: list[str] = field(default_factory=list)  # cells the next look needs


@dataclass
class State:
    selection: Selection | None
    answers: dict[str, Answer]
    waiting: list[str]  # what the selection needs, while it is not made


def apply(scores: Scores) -> State:
    """The amended rule on whatever seeds exist: each question at each look whose seeds 1..n are all there, in order;
    one decided at a look is not looked at again; after the last look an undecided question is final."""
    selection = select(scores)
    if selection is None:
        waiting = missing_cells(scores, SELECTION_ARMS, SELECTION_SETS, range(1, LOOKS[0] + 1))
        return State(None, {q: Answer(q) for q in QUESTIONS}, waiting)
    levels = nominal_levels()
    answers = {}
    for question in QUESTIONS:
        arm, other = pair(question, selection)
        answer = Answer(question)
        for look, level in zip(LOOKS, levels, strict=True):
            seeds = range(1, look + 1)
            found = differences(scores, arm, other, SETS, seeds)
            if found is None:
                answer.waiting = missing_cells(scores, (arm, other), SETS, seeds)
                break
            answer.look, answer.interval = look, pooled(arm, other, found, level)
            answer.result = outcome(answer.interval)
            if answer.result is not None or look == LOOKS[-1]:
                answer.final = True
                break
        answers[question] = answer
    return State(selection, answers, [])


def next_look(seed: int) -> int:
    """The look a seed belongs to: the first whose count covers it."""
    return next(look for look in LOOKS if seed <= look)


def arms_needed(state: State, name: str, seed: int) -> list[str]:
    """The arms the rule still needs on this set and seed, one-view arms first (the cheapest partner of a compare)."""
    if seed > LOOKS[-1]:
        return []
    if name in SELECTION_SETS and seed <= LOOKS[0]:
        arms = {*SELECTION_ARMS, DEFAULT_ARM}  # the selection's four arms, and Q3's, whatever the candidate
    elif state.selection is None:
        return []  # the later sets wait for the candidate
    else:
        look = next_look(seed)
        earlier = [n for n in LOOKS if n < look]
        arms = set()
        for question, answer in state.answers.items():
            # a later look's seeds run only for a question the look before it left open (never before it is taken)
            if not earlier or (answer.look == earlier[-1] and not answer.final):
                arms.update(pair(question, state.selection))
    return sorted(arms, key=lambda arm: (PASSES[arm], arm))


def plan(state: State) -> list[tuple[str, int, str]]:
    """Every (set, seed, arm) the rule still needs, in the order they run: the first two sets' seeds 1-5 (the
    selection), then the later sets' seeds 1-5, then seeds 6-10 of all four, a seed's sets side by side."""
    order = []
    first = [(name, seed) for seed in range(1, LOOKS[0] + 1) for name in SELECTION_SETS]
    first += [(name, seed) for seed in range(1, LOOKS[0] + 1) for name in SETS[2:]]
    later = [(name, seed) for seed in range(LOOKS[0] + 1, LOOKS[-1] + 1) for name in SETS]
    for name, seed in first + later:
        order += [(name, seed, arm) for arm in arms_needed(state, name, seed)]
    return order


def report(state: State) -> list[str]:
    """The rule's state in words, for docs/study.md's generated table."""
    lines = ["**The rule, amended 2026-11-29** (docs/study.md), applied by `bench/arm_table.py --rule`:", ""]
    if state.selection is None:
        return [*lines, f"The selection (the first two sets' seeds 1-{LOOKS[0]}) waits for {len(state.waiting)} runs "
                        f"(first: {', '.join(state.waiting[:3])}). Nothing is decided."]
    selection = state.selection
    lines.append(f"- Selection: {selection.kl.words()}: the candidate is **{selection.candidate}**; "
                 f"{selection.exposure.words()}: Q1 holds it against **{selection.comparator}**.")
    for question, answer in state.answers.items():
        arm, other = pair(question, selection)
        head = f"- {question}, {TITLES[question]} ({arm} − {other}): "
        if answer.interval is None:
            lines.append(head + f"waits for the look at {LOOKS[0]} seeds ({len(answer.waiting)} runs missing, first: "
                                f"{', '.join(answer.waiting[:2])}).")
            continue
        said = meaning(question, answer.result, selection) if answer.final else "not decided at this look"
        more = "" if answer.final else f"; the look at {LOOKS[-1]} seeds waits for {len(answer.waiting)} runs"
        lines.append(head + f"at {answer.look} seeds a set {answer.interval.words()}: **{said}**{more}.")
    return lines


# --- the study's unit files: what pairs, and the scores the rule reads ---

# Two runs of one set and seed pair only when these agree (a value a file does not record is not compared: the
# first units, made before 2026-11-29, record no base-model digest, data digests or versions).
PAIRING_KEYS = ("commit", "base_model_sha256", "expanded_model_sha256", "precision", "data_sha256")


class UnitFileError(ValueError):
    """A unit file that cannot be read or does not pair: the message is one line naming it."""


def precision_used(record: Mapping[str, Any]) -> str | None:
    """The precision the runs were trained in: recorded (compare.json's provenance, or the study's record) or, for the
    first units, what ``--precision auto`` resolves to on the CPU they name (bf16 where it has AVX-512 BF16 or AMX)."""
    recorded = (record.get("provenance") or {}).get("precision_used") or (record.get("study") or {}).get("precision_used")
    if isinstance(recorded, Mapping):
        values = set(recorded.values())
        if len(values) != 1:
            raise UnitFileError(f"its variants were trained in different precisions ({', '.join(sorted(map(str, values)))})")
        recorded = values.pop()
    if recorded:
        return str(recorded)
    asked = (record.get("options") or {}).get("precision")
    if asked and asked != "auto":
        return str(asked)
    flags = (record.get("study") or {}).get("flags")
    if asked == "auto" and isinstance(flags, list) and (record.get("options") or {}).get("device") == "cpu":
        return "bf16" if {"avx512_bf16", "amx_bf16"} & set(flags) else "fp32"
    return None


def provenance(record: Mapping[str, Any]) -> dict[str, Any]:
    """What a pair must share, from compare.json's own provenance where it has one, else the study's record."""
    own = record.get("provenance") or {}
    study = record.get("study") or {}
    models = own.get("models_sha256") or {}
    return {
        "commit": study.get("commit") or own.get("commit"),
        "base_model_sha256": study.get("base_model_sha256") or models.get("base"),
        "expanded_model_sha256": study.get("expanded_model_sha256"),
        "precision": precision_used(record),
        "data_sha256": study.get("data_sha256") or own.get("data_sha256"),
    }


def read_unit(path: Path) -> tuple[str, dict[str, Any]]:
    """One unit file (a compare.json with the study's record): its set's name and its content, checked for the fields
    the tables read; anything else is one line naming the file."""
    from stat import S_ISREG

    try:
        if not S_ISREG(path.lstat().st_mode):
            raise UnitFileError(f"{path}: not a regular file; remove it (the study writes its unit files itself)")
        with path.open("rb") as handle:
            record = json.loads(handle.read(64 << 20))
        name = Path(record["options"]["test"]).parent.name
        for variant in record["variants"]:
            if not isinstance(variant["name"], str) or not isinstance(variant["headline_pool"], str):
                raise TypeError("a variant's name or headline_pool is not text")
            for seed, pools in variant["scores"].items():
                int(seed)
                if not math.isfinite(float(pools[variant["headline_pool"]][record["metric"]])):
                    raise ValueError("a score is not a finite number")
    except UnitFileError:
        raise
    except OSError as error:
        raise UnitFileError(f"{path}: cannot be read ({error.strerror or error})") from None
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
        raise UnitFileError(f"{path}: not a study unit file ({type(error).__name__}: {error}); collect it again or remove "
                            "it (the unit then runs again)") from None
    try:
        provenance(record)
    except UnitFileError as error:
        raise UnitFileError(f"{path}: {error}") from None
    return name, record


def pairing_conflict(held: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The first pairing key both record and on which they differ."""
    for key in PAIRING_KEYS:
        if held.get(key) is not None and new.get(key) is not None and held[key] != new[key]:
            return key
    return None


def unit_scores(paths: Iterable[Path], headline_scale: float = 100.0, *, expected: Mapping[str, Any] | None = None,
                skipped: Callable[[Path, str], None] | None = None) -> Scores:
    """Every unit file's headline scores by set, arm and seed; the files of one set and seed must pair (the same
    commit, models, precision used and data: ``PAIRING_KEYS``), else UnitFileError names both. With ``expected``, a
    file made with another value of a pairing key is left out (``skipped`` is told which file and key)."""
    scores: dict[str, dict[str, dict[int, float]]] = {}
    held: dict[tuple[str, int], dict[str, tuple[Any, Path]]] = {}  # per set and seed: each key's value, and whose
    for path in paths:
        name, record = read_unit(path)
        mine = provenance(record)
        conflict = pairing_conflict(expected, mine) if expected is not None else None
        if conflict:
            if skipped is not None:
                skipped(path, conflict)
            continue
        for variant in record["variants"]:
            for seed_text, pools in variant["scores"].items():
                seed = int(seed_text)
                known = held.setdefault((name, seed), {})
                for key in PAIRING_KEYS:
                    if mine.get(key) is None:
                        continue
                    value, source = known.setdefault(key, (mine[key], path))
                    if value != mine[key]:
                        raise UnitFileError(f"{path} and {source}: {name} seed {seed} was run with another {key} "
                                            f"({mine[key]} against {value}); runs pair only within one")
                score = float(pools[variant["headline_pool"]][record["metric"]]) * headline_scale
                scores.setdefault(name, {}).setdefault(variant["name"], {}).setdefault(seed, score)
    return scores


# --- power and cost (the table beside the rule) ---


def simulate(effect: float, sd: float, runs: int = 20000, seed: int = 0, margin: float = MARGIN) -> dict[str, float]:
    """The two-look design on ``runs`` simulated studies with a true pooled difference ``effect`` and within-set sd:
    the chance of each outcome and the expected seeds a set."""
    import numpy as np
    from scipy.stats import t

    rng = np.random.default_rng(seed)
    sets = len(SETS)
    draws = rng.normal(effect, sd, size=(runs, sets, LOOKS[-1]))
    levels = nominal_levels()
    decided = np.zeros(runs, dtype=bool)
    above = np.zeros(runs, dtype=bool)
    below_or_equivalent = np.zeros(runs, dtype=bool)
    seeds_used = np.full(runs, LOOKS[-1], dtype=np.float64)
    for look, level in zip(LOOKS, levels, strict=True):
        part = draws[:, :, :look]
        estimate = part.mean(axis=(1, 2))
        df = sets * (look - 1)
        spread = np.sqrt(((part - part.mean(axis=2, keepdims=True)) ** 2).sum(axis=(1, 2)) / df)
        half = float(t.ppf(0.5 + level / 2, df)) * spread / math.sqrt(sets * look)
        low, high = estimate - half, estimate + half
        is_above = ~decided & (low > 0)
        is_not = ~decided & ~is_above & ((high < 0) | ((low > -margin) & (high < margin)))
        above |= is_above
        below_or_equivalent |= is_not
        seeds_used[is_above | is_not] = look
        decided |= is_above | is_not
    return {"above": float(above.mean()), "not above": float(below_or_equivalent.mean()),
            "undecided": float(1 - decided.mean()), "seeds": float(seeds_used.mean())}


def fixed_seeds_for_power(effect: float, sd: float, power: float = 0.8, level: float = 1 - ALPHA) -> int:
    """The fewest seeds a set for which one look at the plain 95% pooled interval lies above 0 with ``power``
    (noncentral t, exact)."""
    from scipy.stats import nct, t

    sets = len(SETS)
    for seeds in range(2, 200):
        df = sets * (seeds - 1)
        critical = float(t.ppf(0.5 + level / 2, df))
        if float(nct.sf(critical, df, effect / (sd / math.sqrt(sets * seeds)))) >= power:
            return seeds
    raise ValueError("no seed count under 200 gives that power")


def power_table(sds: Sequence[float], effects: Sequence[float]) -> list[str]:
    rows = ["| within-set sd | true pooled difference | above 0 | inside ±0.5 or below 0 | undecided | mean seeds a set |"
            " one-look seeds a set for 80% at +0.5 |",
            "|---:|---:|---:|---:|---:|---:|---:|"]
    for sd in sds:
        fixed = fixed_seeds_for_power(0.5, sd)
        for effect in effects:
            chances = simulate(effect, sd)
            rows.append(f"| {sd:.2f} | {effect:+.2f} | {chances['above']:.1%} | {chances['not above']:.1%} | "
                        f"{chances['undecided']:.1%} | {chances['seeds']:.1f} | {fixed} |")
    return rows


# Training sentences a set (train + dev, the study's fine-tuning set): what a run's cost scales with.
SET_SENTENCES = {"NCBI-disease": 6347, "BC5CDR-disease": 9141, "BC5CDR-chem": 9141, "BC2GM": 15093}
OLD_ARMS = ("base", "base-both", "base-rdrop", "green-min20", "green-both", "green-agree")  # the 2026-11-27 plan


def cost(open_after_first_look: Sequence[str], candidate: str = "green-both", comparator: str = "base-rdrop") -> float:
    """The amended plan's fine-tuning work (training sentences × forward passes) against the 2026-11-27 plan's
    (six arms, 10 seeds, four sets), when the questions ``open_after_first_look`` go on to the second look."""
    selection = Selection(candidate, comparator, kl=None, exposure=None)  # type: ignore[arg-type]
    every = {q: set(pair(q, selection)) for q in QUESTIONS}
    first_look = set().union(*every.values())
    second_look = set().union(set(), *(every[q] for q in open_after_first_look))
    work = 0.0
    for name, sentences in SET_SENTENCES.items():
        first = {*SELECTION_ARMS, DEFAULT_ARM} if name in SELECTION_SETS else first_look
        work += sentences * LOOKS[0] * sum(PASSES[arm] for arm in first)
        work += sentences * (LOOKS[-1] - LOOKS[0]) * sum(PASSES[arm] for arm in second_look)
    old = sum(SET_SENTENCES.values()) * LOOKS[-1] * sum(PASSES[arm] for arm in OLD_ARMS)
    return work / old


def cost_table() -> list[str]:
    rows = ["| candidate | Q1 against | open after the first look | share of the 2026-11-27 plan's work |", "|---|---|---|---:|"]
    for candidate, comparator in (("green-both", "base-rdrop"), ("green-both", "base-both"), ("green-agree", "base-rdrop")):
        for still_open in ((), ("Q1",), ("Q1", "Q2"), QUESTIONS):
            rows.append(f"| {candidate} | {comparator} | {', '.join(still_open) or 'none'} | "
                        f"{cost(still_open, candidate, comparator):.0%} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["power", "levels", "cost"])
    parser.add_argument("--sd", type=float, action="append", help="within-set sd of a contrast (F1 × 100); repeatable")
    parser.add_argument("--effect", type=float, action="append", help="true pooled difference; repeatable")
    args = parser.parse_args()
    if args.action == "levels":
        print(", ".join(f"{look} seeds: {level:.2%}" for look, level in zip(LOOKS, nominal_levels(), strict=True)))
        return
    if args.action == "cost":
        print("\n".join(cost_table()))
        return
    print("\n".join(power_table(args.sd or [0.36, 0.58, 1.41], args.effect or [0.0, 0.3, 0.5, 1.0])))


if __name__ == "__main__":
    main()
