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

from collections.abc import Mapping
from typing import Any

CONFIG_KEY = "greenadapt"
CONFIG_FORMAT = 1
# Files and folders of a sentence-transformers checkpoint (modules.json names folders such as 1_Pooling).
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "data_config.json")
SENTENCE_TRANSFORMERS_DIRS = ("[0-9]_*", "[0-9][0-9]_*")
CARD_FILE = "README.md"


def config_block(*, method: str, base_model: str, first_new_id: int, n_new: int, general_tokenizer: str) -> dict[str, Any]:
    """The ``greenadapt`` entry of an expanded model's ``config.json``."""
    return {
        "format": CONFIG_FORMAT,
        "stage": "expand",
        "method": method,
        "base_model": base_model,
        "new_rows": {"first": first_new_id, "count": n_new},
        "general_tokenizer": general_tokenizer,
        "pooling": "mean",
        "note": (
            "Two tokenizers: the domain tokenizer at the folder root and the base model's in "
            f"{general_tokenizer}/. greenadapt trains on a 50/50 mixture and averages the predictions of both."
        ),
    }


def expanded_card(
    *,
    base_model: str,
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
    sources = ", ".join(f"`{c}`" for c in corpus) or "(not recorded)"
    lines = [
        "---",
        f"base_model: {base_model}",
        "library_name: transformers",
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
        f"| vocabulary | {stats['vocab_size_before']:,} → {stats['vocab_size_after']:,} |",
        f"| shared words the map was fitted on | {align_stats.get('n_shared', 'n/a')} |",
        f"| held-out cosine of the map | {fit} |",
        f"| cost of the vectors and the map (w2v + align) | {upstream_cost.get('wall_seconds') or 0:.0f} s wall, "
        f"{(upstream_cost.get('cpu_seconds') or 0) / 3600:.3f} CPU h; expand's own cost is in `manifest.json` |",
        "",
        "## Two tokenizers",
        "",
        f"The folder root holds the domain tokenizer (it knows the added words); `{general_tokenizer}/` holds the",
        "base model's own. greenadapt fine-tunes on a 50/50 mixture of the two and averages the predictions of",
        "both (mean pooling); a model used through one tokenizer alone scores lower. Outside greenadapt:",
        "",
        "```python",
        "from transformers import AutoModel, AutoTokenizer",
        "",
        'model = AutoModel.from_pretrained("PATH")',
        'domain = AutoTokenizer.from_pretrained("PATH")',
        f'general = AutoTokenizer.from_pretrained("PATH/{general_tokenizer}")',
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
    corpus = ", ".join(f"`{c}`" for c in block.get("corpus") or []) or "(not recorded)"
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


def finetuned_card(
    *,
    base_model: str,
    task: str,
    labels: list[str],
    metric: str,
    summary: Mapping[str, Any],
    seeds: list[int],
    mix: float,
    pool: str,
    two_tokenizers: bool,
    general_tokenizer: str,
    adaptation: Mapping[str, Any] | None = None,
) -> str:
    """README.md of a fine-tuned run folder: what was trained, its scores per split and pooling, how to use it."""
    pipeline_tag = {"ner": "token-classification", "classify": "text-classification"}.get(task, task)
    lines = [
        "---",
        f"base_model: {base_model}",
        "library_name: transformers",
        f"pipeline_tag: {pipeline_tag}",
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
            lines.append(f"| {split} | {view}{headline} | {100 * score['mean']:.2f} ± {100 * score.get('std', 0):.2f} (n={score.get('n')}) |")
        lines.append("")
    lines += adaptation_lines(adaptation)
    if two_tokenizers:
        pipeline_task = {"ner": "token-classification", "classify": "text-classification", "qa": "question-answering"}.get(task, task)
        lines += [
            "## Two tokenizers",
            "",
            f"Trained on a {mix:g} share of domain-tokenized examples (the rest with the base model's tokenizer in "
            f"`{general_tokenizer}/`). The headline pools both: a transformers pipeline on the folder alone uses only "
            "the domain tokenizer and scores lower. These give the pooled predictions:",
            "",
            "```python",
            "import greenadapt",
            "",
            'model = greenadapt.load("PATH")  # .predict(texts), or .answer(question, context) for QA',
            f'pipe = greenadapt.pipeline("{pipeline_task}", model="PATH")  # a transformers Pipeline',
            "```",
            "",
            "or on the command line `greenadapt predict -m PATH notes.txt` (raw text, JSON lines, task files, `-` for stdin).",
            "",
        ]
    from greenadapt.finetune.data import untyped_labels

    if task == "ner" and untyped_labels(labels):
        lines += ["The labels carry no entity type; train with `--entity-type TYPE` for labels that transformers'",
                  "entity aggregation (`aggregation_strategy=\"simple\"`) groups into entities.", ""]
    return "\n".join(lines)
