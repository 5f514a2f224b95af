"""What an adapted folder says about itself to code and people that do not know greenadapt.

Two pieces, both written by ``expand``:

- a ``greenadapt`` block in ``config.json`` (plain JSON that ``transformers``
  keeps as a config attribute, so fine-tuned copies carry it on): the method,
  the range of added rows, where the general tokenizer lies and that
  predictions are meant to be mean-pooled over both tokenizers;
- ``README.md``, a model card with YAML metadata in place of the base model's
  own (which describes another model: its training sets, its library).

The base model's sentence-transformers files are not copied (see
:data:`SENTENCE_TRANSFORMERS_FILES`): sentence-transformers would read them,
tokenize with the domain tokenizer alone and return embeddings that differ
from the base model's without a word. The card says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import PurePath
from typing import Any

CONFIG_KEY = "greenadapt"
CONFIG_FORMAT = 1
# Files and folders of a sentence-transformers checkpoint (modules.json names folders such as 1_Pooling).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "data_config.json")
SENTENCE_TRANSFORMERS_DIRS = ("[0-9]_*", "[0-9][0-9]_*")
CARD_FILE = "README.md"


def config_block(
    *, method: str, base_model: str, base_model_hub_id: str | None, first_new_id: int, n_new: int, general_tokenizer: str
) -> dict[str, Any]:
    """The ``greenadapt`` entry of an expanded model's ``config.json`` (``base_model``: a name, never a local path)."""
    return {
        "format": CONFIG_FORMAT,
        "stage": "expand",
        "method": method,
        "base_model": base_model,
        "base_model_hub_id": base_model_hub_id,
        "new_rows": {"first": first_new_id, "count": n_new},
        "general_tokenizer": general_tokenizer,
        "pooling": "mean",
        "note": (
            "Two tokenizers: the domain tokenizer at the folder root and the base model's in "
            f"{general_tokenizer}/. greenadapt fine-tunes on both views of every example (QA: a 50/50 mixture) and averages the "
            "predictions of both."
        ),
    }


def publishable_source(source: str) -> str:
    """A corpus as a published card may name it: a registered name or a URL as given, a file by its name alone.

    A path says where a file lies on one machine (``/home/<user>/…``) and would be published with the model.
    """
    if "://" in source or ("/" not in source and "\\" not in source):
        return source
    return PurePath(source).name or source


def _yaml_header(base_model_hub_id: str | None, *extra: str) -> list[str]:
    """The card's metadata: ``base_model`` only when it is a Hub id (the Hub rejects anything else)."""
    base = [f"base_model: {base_model_hub_id}"] if base_model_hub_id else []
    return ["---", *base, "library_name: transformers", *extra]


def expanded_card(
    *,
    base_model: str,
    base_model_hub_id: str | None,
    method: Mapping[str, Any],
    stats: Mapping[str, Any],
    align_stats: Mapping[str, Any],
    corpus: list[str],
    general_tokenizer: str,
    upstream_cost: Mapping[str, float],
) -> str:
    """README.md of an expanded folder: YAML metadata, then what was added, how to load it, what it cost."""
    cosine = align_stats.get("heldout_cosine")
    fit = f"{cosine:.3f}" if isinstance(cosine, (int, float)) else "n/a (the method fits no map)"
    sources = ", ".join(f"`{publishable_source(c)}`" for c in corpus) or "(not recorded)"
    lines = [
        *_yaml_header(base_model_hub_id),
        "tags:",
        "- greenadapt",
        "- domain-adaptation",
        "- vocabulary-expansion",
        "---",
        "",
        f"# {base_model}, vocabulary-expanded with greenadapt",
        "",
        f"The base model with {stats['n_new']:,} domain words added as whole tokens (ids "
        f"{stats['first_new_id']:,}–{stats['vocab_size_after'] - 1:,}); every original weight is unchanged.",
        "",
        "| | |",
        "|---|---|",
        f"| method | `{method.get('name')}`: {method.get('summary', '')} |",
        f"| corpus | {sources} |",
        f"| new words | {_selection_text(stats)} |",
        f"| vocabulary | {stats['vocab_size_before']:,} → {stats['vocab_size_after']:,} |",
        f"| shared words the map was fitted on | {align_stats.get('n_shared', 'n/a')} |",
        f"| held-out cosine of the map | {fit} |",
        f"| cost of the vectors and the map (w2v + align) | {upstream_cost.get('wall_seconds') or 0:.0f} s wall, "
        f"{(upstream_cost.get('cpu_seconds') or 0) / 3600:.3f} CPU h; expand's own cost is in `manifest.json` |",
        "",
        "## Two tokenizers",
        "",
        f"The folder root holds the domain tokenizer (it knows the added words); `{general_tokenizer}/` holds the",
        "base model's own. greenadapt fine-tunes on both views of every example (QA training: a 50/50 mixture of the",
        "two) and averages the predictions of both (mean pooling); a model used through one tokenizer alone scores",
        "lower. Outside greenadapt:",
        "",
        "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        'path = "."  # this folder (run from inside it), or its Hub id once uploaded',
        "model = AutoModel.from_pretrained(path)",
        "domain = AutoTokenizer.from_pretrained(path)",
        f'general = AutoTokenizer.from_pretrained(path, subfolder="{general_tokenizer}")',
        "# run both tokenizations of a text and average the word-level outputs",
        "```",
        "",
        "`config.json` records the same facts under `greenadapt` for code to read.",
        "",
        "## Not a sentence-transformers model",
        "",
        "The base model's sentence-transformers files were not copied: sentence-transformers would tokenize",
        "with the domain tokenizer alone and return embeddings that differ from the base model's without a",
        "warning. Use the model through `transformers` (above) or greenadapt's `finetune`/`predict`.",
        "",
    ]
    return "\n".join(lines)


def _selection_text(stats: Mapping[str, Any]) -> str:
    """How the new words were chosen, and the flag that gives the paper's choice (every word2vec word)."""
    selection = stats.get("selection") or {}
    min_count, max_new = selection.get("min_count"), selection.get("max_new")
    if min_count is None:
        return "the corpus words the model does not know"
    rarer = (stats.get("excluded") or {}).get("below_min_count", 0)
    text = f"the corpus words the model does not know, seen at least {min_count:,} times ({rarer:,} rarer left out)"
    if max_new is not None:
        text += f", the {max_new:,} most frequent"
    if min_count > 1:
        text += "; the paper adds every word2vec word: `expand --min-count-new 1`"
    return text


def cost_summary(cost: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of a cost block a reader needs: wall seconds, CPU hours, GPU seconds, energy."""
    return {
        "wall_seconds": round(float(cost.get("wall_seconds") or 0.0), 1),
        "cpu_hours": round(float(cost.get("cpu_seconds") or 0.0) / 3600, 4),
        "gpu_seconds": round(float(cost.get("gpu_seconds") or 0.0), 1),
        "energy_kwh": None if cost.get("energy_kwh") is None else round(float(cost["energy_kwh"]), 6),
    }


def adaptation_lines(block: Mapping[str, Any] | None) -> list[str]:
    """The model card section on the adapted model a fine-tuned one starts from (its config's ``greenadapt`` block)."""
    if not block:
        return []
    new_rows = block.get("new_rows") or {}
    corpus = ", ".join(f"`{publishable_source(str(c))}`" for c in block.get("corpus") or []) or "(not recorded)"
    cost = block.get("vectors_cost") or {}
    lines = [
        "## Adaptation",
        "",
        f"Starts from `{block.get('base_model')}` expanded by greenadapt: {new_rows.get('count', '?')} new words "
        f"(ids from {new_rows.get('first', '?')}), initialised with `{block.get('method')}`, from the corpus {corpus}.",
    ]
    if cost:
        lines.append(
            f"Vectors and map cost {cost.get('wall_seconds', 0):.0f} s wall, {cost.get('cpu_hours', 0):.3f} CPU h"
            + (f", {cost['energy_kwh']:.4f} kWh" if cost.get("energy_kwh") is not None else "") + "."
        )
    return [*lines, ""]


def _domain_alone(rows: Sequence[tuple[str, str, Mapping[str, Any]]], pool: str, metric: str) -> str:
    """How the domain tokenizer alone did against the pooled headline, in the table's own figures (the test split
    where there is one): the card says what its table shows, whichever way it went."""
    by_split: dict[str, dict[str, float]] = {}
    for split, view, score in rows:
        by_split.setdefault(split, {})[view] = float(score["mean"])
    split = "test" if "test" in by_split else next(iter(by_split), "")
    views = by_split.get(split, {})
    if "domain" not in views or pool not in views or pool == "domain":
        return ""
    domain, pooled = 100 * views["domain"], 100 * views[pool]
    relation = "below" if domain < pooled else "above" if domain > pooled else "equal to"
    return f" ({split} {metric} {domain:.2f}, {relation} the headline's {pooled:.2f})"


def finetuned_card(
    *,
    base_model: str,
    base_model_hub_id: str | None,
    task: str,
    pipeline_tag: str,
    labels: list[str],
    metric: str,
    summary: Mapping[str, Any],
    seeds: list[int],
    mix: float,
    pool: str,
    two_tokenizers: bool,
    general_tokenizer: str,
    adaptation: Mapping[str, Any] | None = None,
    untyped_labels: Sequence[str] = (),
) -> str:
    """README.md of a fine-tuned run folder: what was trained, its scores per split and pooling, how to use it.

    ``pipeline_tag``: transformers' name of the task (the registry's ``Task.pipeline_tag``).
    """
    lines = [
        *_yaml_header(base_model_hub_id, f"pipeline_tag: {pipeline_tag}"),
        "tags:",
        "- greenadapt",
        "---",
        "",
        f"# {base_model}, fine-tuned for {task} with greenadapt",
        "",
        f"Labels: {', '.join(f'`{label}`' for label in labels)}. Seeds: {', '.join(map(str, seeds))}"
        + ("" if len(seeds) == 1 else " (one model per seed in `seed-<N>/`)") + ".",
        "",
    ]
    rows = [(split, view, scores[metric]) for split, views in summary.items() if isinstance(views, Mapping)
            for view, scores in views.items() if isinstance(scores, Mapping) and isinstance(scores.get(metric), Mapping)]
    if rows:
        lines += [f"| split | tokenizer(s) | {metric} (mean ± sd over seeds) |", "|---|---|---|"]
        for split, view, score in rows:
            headline = " (headline)" if view == pool else ""
            n = score.get("n") or 1
            spread = f" ± {100 * score.get('std', 0):.2f} ({n} seeds)" if n > 1 else " (1 seed)"
            lines.append(f"| {split} | {view}{headline} | {100 * score['mean']:.2f}{spread} |")
        lines.append("")
    lines += adaptation_lines(adaptation)
    if two_tokenizers:
        lines += [
            "## Two tokenizers",
            "",
            f"Trained on a {mix:g} share of domain-tokenized examples (the rest with the base model's tokenizer in "
            f"`{general_tokenizer}/`). The headline pools both: transformers' own pipeline on the folder alone uses only "
            f"the domain tokenizer{_domain_alone(rows, pool, metric)}, so config.json's `custom_pipelines` sends "
            "`transformers.pipeline` to this folder's `greenadapt_pipeline.py`, which needs `trust_remote_code=True` and "
            "greenadapt installed (without them transformers refuses rather than score one view). These give the pooled "
            "predictions:",
            "",
            "```python",
            "import greenadapt",
            "import transformers",
            "",
            'path = "."  # this folder (run from inside it)',
            "model = greenadapt.load(path)  # .predict(texts), or .answer(question, context) for QA",
            f'pipe = greenadapt.pipeline("{pipeline_tag}", model=path)  # a transformers Pipeline',
            f'pipe = transformers.pipeline("{pipeline_tag}", model=path, trust_remote_code=True)  # the same one',
            "```",
            "",
            "or on the command line `greenadapt predict -m . notes.txt` (raw text, JSON lines, task files, `-` for stdin).",
            "",
        ]
    if untyped_labels:  # only NER labels can lack an entity type
        lines += ["The labels carry no entity type; train with `--entity-type TYPE` for labels that transformers'",
                  "entity aggregation (`aggregation_strategy=\"simple\"`) groups into entities.", ""]
    return "\n".join(lines)
