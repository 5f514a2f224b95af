"""``expand``: the domain-adapted model folder.

New words are the word2vec words that are not in the model's vocabulary,
keeping those with a count >= ``min_count`` that the domain tokenizer can
actually produce (at most ``max_input_chars_per_word`` characters, left
unchanged by the model's normalizer and pre-tokenizer, not starting with
``##``). **Order**: count descending, ties by the word in Unicode code
point order; ``max_new`` keeps the first ``max_new``. The i-th new word gets
id ``V + i``, where V is the number of rows of the input embedding matrix
(``new_words.tsv`` lists word, id and count).

The weights are edited at the state-dict level, never through a model
class, so any head (MLM, QA, token classification, …) survives:

- every tensor named ``*word_embeddings.weight`` and every other 2-D
  tensor of the same (V, d) shape (a separately stored tied or untied
  decoder) gets rows V… appended; rows 0…V−1 stay bit-identical;
- row V+i is what the align output's method makes (see :mod:`greenadapt.adaptation.methods`:
  lstsq's ``float32(v_i) @ float32(W)ᵀ``, the subword mean, FOCUS's weighted
  sum, …; for ``random`` a draw from N(mean, cov) seeded with ``seed``), rescaled
  to the mean norm of the model's whole-word rows under ``--match-norm``, cast to
  the tensor's dtype;
- every 1-D tensor of length V (output biases such as
  ``cls.predictions.bias``) is extended with the **mean of its existing
  values**, a neutral prior that neither favours nor suppresses new words;
- ``config.json`` gets the new ``vocab_size``.

Weights are written as one ``model.safetensors`` (metadata ``{"format":
"pt"}``) streamed tensor by tensor, and only the new words' vectors are
read from ``vectors.bin``, so peak memory is about those vectors plus the
model, not several copies of the grown embedding matrix.

The folder's top holds the domain tokenizer T̂ (see
:mod:`greenadapt.adaptation.domain_tokenizer`), so ``AutoTokenizer.from_pretrained``
gives it; ``general-tokenizer/`` holds the original tokenizer T_LM
unchanged. Other files (generation config, …) are copied; weight files of
other formats are not, since they would no longer match, nor the base's
model card and sentence-transformers files, which would describe another
model (:mod:`greenadapt.artifacts.model_card` writes the folder's own).
"""

from __future__ import annotations

import functools
import inspect
import json
import logging
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.adaptation.methods import DEFAULT_METHOD, CorpusAccess, InitMethod, RowContext, get_method
from greenadapt.adaptation.methods.base import describe, recorded_seed
from greenadapt.adaptation.model_files import copy_other_files
from greenadapt.adaptation.new_words import NEW_WORDS_FILE, NewWords, select_new_words
from greenadapt.adaptation.settings import AlignSettings, NewRowsSettings
from greenadapt.adaptation.stages import other_draws, w2v_of_align
from greenadapt.adaptation.w2v import pretokenized_corpus_of
from greenadapt.adaptation.weights import average_draws, grown_tensor_specs, new_row_source, vocabulary_tensors, write_safetensors
from greenadapt.artifacts.manifest import Manifest, load_stage, manifest_identity
from greenadapt.artifacts.model_card import (
    CARD_FILE,
    CONFIG_KEY,
    config_block,
    cost_summary,
    expanded_card,
    publishable_source,
)
from greenadapt.artifacts.pretrained import display_name, hub_id
from greenadapt.artifacts.stage import StageOutcome, StageRun, resource_errors
from greenadapt.artifacts.workspace import stage_variant_dir
from greenadapt.defaults import DEFAULT_MIN_COUNT_NEW, DEFAULT_SEED
from greenadapt.errors import ModelError, StageError, UsageError
from greenadapt.progress import Progress
from greenadapt.options import DEFAULT_RUN, Run
from greenadapt.redaction import scrub_secrets

if TYPE_CHECKING:
    from greenadapt.adaptation.settings import ExpandSettings, MethodSettings
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer
    from greenadapt.adaptation.vectors import VectorRows
    from greenadapt.artifacts.pretrained import ModelRef

log = logging.getLogger(__name__)

CHECKPOINT_SUFFIX = ".checkpoint"  # beside the output: a long fit (--method distill) resumes from it

WEIGHTS_FILE = "model.safetensors"
ORDER = "count descending, then word (Unicode code point order)"
BIAS_FILL = "mean of the existing bias values"
def _model_of(model: str | None, align_dir: Path, align_manifest: Manifest) -> tuple[Any, Any]:
    """The model to expand (``model``, else the one align was fitted on) and its tokenizer, checked against the map's."""
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer
    from greenadapt.adaptation.stages import model_for_stage, vocab_digest

    fitted_on = align_manifest.section("config", "model")
    ref = model_for_stage(model, fitted_on or None, align_dir)
    general = load_general_tokenizer(ref.path)
    aligned_to = align_manifest.stats.get("vocab_digest")
    if aligned_to is not None and vocab_digest(general) != aligned_to:
        raise ModelError(
            f"the vocabulary of {ref.name} differs from that of the model the map was fitted on",
            path=ref.path,
            hint="rerun `greenadapt align` with this --model, or expand the model align used",
        )
    if fitted_on.get("path") != str(ref.path):
        log.warning("expanding %s with a map fitted on %s (same vocabulary)", ref.path, fitted_on.get("path"))
    return ref, general


def expand_stage(
    *,
    align: Path | None = None,
    corpus: Sequence[str] | None = None,
    model: str | None = None,
    rows: NewRowsSettings | None = None,
    min_count: int = DEFAULT_MIN_COUNT_NEW,
    seed: int = DEFAULT_SEED,
    method: str | None = None,
    also_align: Sequence[Path] = (),
    run: Run = DEFAULT_RUN,
) -> StageOutcome:
    """Write the expanded model folder for the align output ``align`` (or ``corpus``'s).

    ``also_align``: the align folders of other word2vec draws of the same corpus (``adapt --w2v-draws``): each new
    row is then the mean of the draws' rows for that word, rescaled to their mean norm, so that one draw's luck
    weighs 1/k. Every draw must hold every new word and be fitted with the same method on the same model.

    ``rows``: which new words get rows (``max_new``, ...): expand's or adapt's settings as they are (None: the defaults).

    ``method`` (optional): the initialisation method the rows come from. The
    method is chosen when aligning; here it picks that method's align folder
    in the workspace (with ``corpus``), or checks that ``align`` was fitted with it.

    ``model`` defaults to the model align was fitted on; another model must
    have the same vocabulary and embedding size (e.g. a fine-tuned copy).
    The output folder defaults to the ``expand`` sibling of the align folder.
    """
    workdir, force, wait, progress = run.workdir, run.force, run.wait, run.progress
    rows = rows or NewRowsSettings()
    align_dir, align_manifest, fitted = _find_align(align, corpus, model, workdir, method)
    w2v_dir, w2v_manifest = w2v_of_align(align_dir, align_manifest)
    method_options = _recorded_method_options(align_manifest)
    ref, general = _model_of(model, align_dir, align_manifest)

    config, draws, out_dir, checkpoint = _destination(align_dir, align_manifest, w2v_dir, fitted, ref, also_align, run,
                                                      rows=rows, min_count=min_count, seed=seed)
    inputs = [config["align"], manifest_identity(w2v_dir, w2v_manifest), ref.identity(), *config.get("other_draws", [])]
    with StageRun(kinds.EXPAND, out_dir, config, inputs, force=force, wait=wait, libraries=_libraries(ref.path, fitted)) as stage:
        if stage.skipped:
            assert stage.manifest is not None
            return StageOutcome(stage.out, stage.manifest, True, stage.skip_reason)
        corpus, upstream = _upstream(align_manifest, w2v_manifest)
        with resource_errors(stage.tmp):
            stats = _expand(
                align_dir, w2v_dir, ref, general, method=fitted, method_options=method_options, rows=rows,
                min_count=min_count, seed=seed, dest=stage.tmp, progress=progress, other_draws=[(d, w) for d, _, w in draws],
                corpus_access=_corpus_access(ref, w2v_dir, w2v_manifest, corpus, checkpoint) if fitted.reads_corpus else None,
                # in config.json too: fine-tuned copies carry the block on, so their cards can say what they build on
                # The corpus by name: a path says where it lies on this machine and would be published with the model.
                provenance={"corpus": [publishable_source(c) for c in corpus], "vectors_cost": cost_summary(upstream)},
            )
            _write_card(stage.tmp, ref, stats, align_manifest, corpus, upstream)
        manifest = stage.commit(stats=stats)
    if fitted.owns_checkpoint(checkpoint):
        shutil.rmtree(checkpoint, ignore_errors=True)
    log.info("expand: %d new words (ids %d…) -> %s", stats["n_new"], stats["first_new_id"], stage.out)
    return StageOutcome(stage.out, manifest, False)


def _recorded_method_options(align_manifest: Manifest) -> AlignSettings:
    """The method's options as align recorded them (those it uses; the others at their defaults)."""
    return AlignSettings.build(align_manifest.section("config", "method_options") or {})


def _destination(align_dir: Path, align_manifest: Manifest, w2v_dir: Path, fitted: InitMethod, ref: ModelRef, also_align: Sequence[Path],
                 run: Run, *, rows: NewRowsSettings, min_count: int,
                 seed: int) -> tuple[dict[str, Any], list[tuple[Path, Manifest, Path]], Path, Path]:
    """The stage's config, the other draws, its output folder (checked: greenadapt replaces only what it wrote) and checkpoint."""
    from greenadapt.artifacts.destination import check_destination, protected

    # align-focus -> expand-focus: each method's model beside its own fit.
    suffix = align_dir.name.removeprefix("align") if align_dir.name.startswith("align") else ""
    config = _config(ref, align_dir, align_manifest, fitted, rows=rows, min_count=min_count, seed=seed)
    draws = other_draws(also_align, align_dir, fitted, ref)
    if draws:  # recorded only then, so single-draw outputs keep their fingerprints
        config["other_draws"] = [manifest_identity(d, m) for d, m, _ in draws]
    own = inspect.signature(expand_stage).parameters  # the defaults where declared: the group's, and this function's two
    defaults = functools.partial(_config, ref, align_dir, align_manifest, fitted, rows=NewRowsSettings(),
                                 **{k: own[k].default for k in ("min_count", "seed")})
    out_dir = Path(run.out) if run.out is not None else stage_variant_dir(align_dir.parent / f"expand{suffix}", config, defaults,
                                                                          force=run.force)
    check_destination(
        out_dir, kind="expand", force=run.force, workspace=run.workdir,
        reads=[
            *protected("the --align input", align_dir),
            *protected("the w2v output align read", w2v_dir),
            *protected("the base --model", ref.path),
        ],
    )
    checkpoint = out_dir.with_name(f"{out_dir.name}{CHECKPOINT_SUFFIX}")
    if fitted.reads_corpus:
        from greenadapt.artifacts.files import refuse_planted

        refuse_planted(checkpoint, f"{checkpoint.name}, the checkpoints folder of the fit,", kind="folder")
    if fitted.reads_corpus and checkpoint.exists() and not fitted.owns_checkpoint(checkpoint):
        raise UsageError(f"{checkpoint} exists and is not a checkpoint greenadapt wrote", hint="move it away, or choose another --out")
    return config, draws, out_dir, checkpoint


def _corpus_access(ref: ModelRef, w2v_dir: Path, w2v_manifest: Manifest, corpus: list[str], checkpoint: Path) -> CorpusAccess:
    """What a method that reads the corpus is given: the base model, the pre-tokenized corpus (made on demand), a checkpoint folder."""
    corpus_file = functools.partial(pretokenized_corpus_of, w2v_dir, w2v_manifest, corpus, ref.path)
    return CorpusAccess(model_path=ref.path, corpus_file=corpus_file, checkpoint_dir=checkpoint)


def _libraries(model_path: Path, method: InitMethod) -> tuple[str, ...]:
    """The libraries whose versions the manifest records: those this run uses (a method that reads the
    corpus runs the model with torch and transformers, all that reading any weights may take besides)."""
    from greenadapt.artifacts.model_weights import weight_libraries

    model = ("torch", "transformers") if method.reads_corpus else weight_libraries(model_path)
    return ("numpy", "safetensors", "tokenizers", *model)


def _config(ref: Any, align_dir: Path, align_manifest: Manifest, fitted: InitMethod, *, rows: NewRowsSettings, min_count: int,
            seed: int) -> dict[str, Any]:
    """What expand's fingerprint records: every option that changes its output."""
    return {
        "model": ref.identity(),
        "align": manifest_identity(align_dir, align_manifest),
        **rows.fingerprinted(NewRowsSettings),
        "min_count": min_count,
        "seed": recorded_seed(fitted, seed),
    }


def _find_align(
    align: Path | None, corpus: Sequence[str] | None, model: str | None, workdir: Path | None, method: str | None
) -> tuple[Path, Manifest, InitMethod]:
    """The align folder expand reads (``align``, or the workspace's for ``corpus`` and ``method``), and the method it fitted."""
    from greenadapt.adaptation.stages import locate_upstream, stage_suffix

    chosen = get_method(method) if method is not None else None  # an unknown name fails here, before any reading
    align_dir = locate_upstream("align", align, corpus, model, workdir)
    if chosen is not None and align is None:
        align_dir = align_dir.with_name(f"align{stage_suffix(chosen, AlignSettings())}")
    align_manifest = load_stage(align_dir, kinds.ALIGN)
    fitted = get_method(str(align_manifest.config.get("method", DEFAULT_METHOD)))
    if chosen is not None and chosen.name != fitted.name:
        raise UsageError(
            f"--method {chosen.name}, but {align_dir} was fitted with {fitted.name}",
            path=align_dir, hint=f"rerun `greenadapt align --method {chosen.name}`, or drop --method to use {fitted.name}",
        )
    return align_dir, align_manifest, fitted


def _upstream(align_manifest: Manifest, w2v_manifest: Manifest) -> tuple[list[str], dict[str, Any]]:
    """The corpus the vectors came from, and the cost of the vectors and the map (w2v + align)."""
    from greenadapt.machine.energy import cost_of, sum_costs

    corpus = [str(i["path"]) for i in w2v_manifest.inputs if i.get("path") and "stage" not in i and "files_digest" not in i]
    return corpus, sum_costs([cost_of(w2v_manifest), cost_of(align_manifest)])


def _write_card(
    dest: Path, ref: ModelRef, stats: Mapping[str, Any], align_manifest: Manifest, corpus: list[str], upstream: Mapping[str, Any]
) -> None:
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    card = expanded_card(
        base_model=display_name(ref), base_model_hub_id=hub_id(ref),
        method=stats.get("method_description") or {"name": stats.get("method")}, stats=stats,
        align_stats=align_manifest.stats, corpus=corpus, general_tokenizer=GENERAL_TOKENIZER_DIR, upstream_cost=upstream,
    )
    (dest / CARD_FILE).write_text(scrub_secrets(card), encoding="utf-8")


def _expand(
    align_dir: Path,
    w2v_dir: Path,
    ref: ModelRef,
    general: GeneralTokenizer,
    *,
    method: InitMethod,
    method_options: MethodSettings,
    rows: NewRowsSettings,
    min_count: int,
    seed: int,
    dest: Path,
    progress: Progress,
    provenance: Mapping[str, Any],
    corpus_access: CorpusAccess | None = None,
    other_draws: Sequence[tuple[Path, Path]] = (),
) -> dict[str, Any]:
    from greenadapt.adaptation.domain_tokenizer import tokenization_change
    from greenadapt.adaptation.vectors import read_counts
    from greenadapt.artifacts.model_weights import iter_state_dict, pick_embedding_key

    counts = read_counts(w2v_dir / "counts.tsv")
    listed = list(counts)
    new = select_new_words(general, listed, counts, max_new=rows.max_new, min_count=min_count)
    del counts  # the chosen words' counts are in ``new``; a million words' dict need not live through the writing
    vectors, shared_vectors, shared_ids = _method_vectors(method, w2v_dir, listed, new, general, progress)
    del listed

    state = dict(iter_state_dict(ref.path))
    embedding_key = pick_embedding_key(list(state), ref.path)
    n_rows, dim = state[embedding_key].shape
    _check_rows(general, n_rows, ref)
    row_keys, bias_keys = vocabulary_tensors(state, embedding_key, ref.path)
    context = RowContext(
        align_dir=align_dir, words=new.words, vectors=vectors, embeddings=state[embedding_key].to_float32(),
        general=general, shared_vectors=shared_vectors, shared_ids=shared_ids, seed=seed, options=method_options,
        corpus_access=corpus_access, progress=progress,
    )
    new_rows = new_row_source(method, context)
    if other_draws:
        new_rows = functools.partial(average_draws, [new_rows, *(_draw_rows(method, context, new, d, progress) for d in other_draws)])

    progress.start("writing weights", total=len(state), unit="tensors")
    n_new = len(new.words)
    write_safetensors(dest / WEIGHTS_FILE, grown_tensor_specs(state, row_keys, bias_keys, n_new, new_rows), metadata={"format": "pt"},
                      progress=progress)
    progress.finish()
    embedding_dtype = state[embedding_key].torch_name
    match_norm_target, method_stats = context.match_norm_target, context.method_stats
    # The vectors (1.5 GB for a million words) go before the tokenizers are written, not after.
    del state, vectors, new_rows, shared_vectors, context
    _write_config(ref, dest, method, n_rows, n_new, provenance)

    tokenizer_facts = _write_tokenizers(general, new, n_rows, ref, dest, progress)
    return {
        "n_new": n_new,
        "vocab_size_before": n_rows,
        "vocab_size_after": n_rows + n_new,
        "first_new_id": n_rows,
        "method": method.name,
        "method_description": describe(method, method_options),
        "match_norm_target": match_norm_target,
        **method_stats,
        "order": ORDER, "selection": {"min_count": min_count, "max_new": rows.max_new},
        "tokenization": tokenization_change(general, new.words),
        "domain_tokenizer": tokenizer_facts,
        "excluded": new.excluded,
        "extended_tensors": row_keys,
        "extended_biases": bias_keys,
        "bias_fill": BIAS_FILL,
        "embedding_dtype": embedding_dtype,
        "new_row_precision": f"float32 matmul, cast to {embedding_dtype}",
    }


def _write_tokenizers(general: GeneralTokenizer, new: NewWords, n_rows: int, ref: ModelRef, dest: Path,
                      progress: Progress) -> dict[str, Any]:
    """The domain tokenizer at the top, the general one beside it, the base's other files and new_words.tsv; the tokenizer's facts."""
    from greenadapt.adaptation.domain_tokenizer import copy_general_tokenizer, write_domain_tokenizer
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    progress.start("writing tokenizers")
    facts = write_domain_tokenizer(general, new.words, n_rows, dest)
    copy_general_tokenizer(ref.path, dest / GENERAL_TOKENIZER_DIR)
    copy_other_files(ref.path, dest)
    with open(dest / NEW_WORDS_FILE, "w", encoding="utf-8", newline="\n") as handle:
        ids = range(n_rows, n_rows + len(new.words))
        handle.write("".join(map("{}\t{}\t{}\n".format, new.words, ids, new.counts)))
    progress.finish()
    return facts


def _draw_rows(method: InitMethod, context: RowContext, new: NewWords, draw: tuple[Path, Path],
               progress: Progress) -> Callable[[], Iterator[np.ndarray]]:
    """The new rows of another word2vec draw (its align folder, its w2v folder), for the same words as ``context``."""
    from greenadapt.adaptation.vectors import read_counts

    other_align, other_w2v = draw
    listed = read_counts(other_w2v / "counts.tsv")
    missing = next((w for w in new.words if w not in listed), None)
    if missing is not None:
        raise StageError(f"the new word {missing!r} is not in this word2vec draw", path=other_w2v,
                         hint="draws to average are made by one command on one corpus, differing only in --seed")
    vectors, shared_vectors, shared_ids = _method_vectors(method, other_w2v, list(listed), new, context.general, progress)
    return new_row_source(method, replace(context, align_dir=other_align, vectors=vectors, shared_vectors=shared_vectors,
                                          shared_ids=shared_ids))


def _check_rows(general: GeneralTokenizer, n_rows: int, ref: ModelRef) -> None:
    if general.size > n_rows:
        raise ModelError(f"the tokenizer has ids up to {general.size - 1} but the embedding matrix only {n_rows} rows", path=ref.path)


def _write_config(ref: ModelRef, dest: Path, method: InitMethod, n_rows: int, n_new: int, provenance: Mapping[str, Any]) -> None:
    """The base model's config.json with the grown vocabulary and the ``greenadapt`` block."""
    from greenadapt.artifacts.model_folder import GENERAL_TOKENIZER_DIR

    config = json.loads((ref.path / "config.json").read_text(encoding="utf-8"))
    if config.get("vocab_size") != n_rows:
        log.warning("config.json says vocab_size %s, the embedding matrix has %d rows", config.get("vocab_size"), n_rows)
    config["vocab_size"] = n_rows + n_new
    config[CONFIG_KEY] = config_block(
        method=method.name, base_model=display_name(ref), base_model_hub_id=hub_id(ref), first_new_id=n_rows, n_new=n_new,
        general_tokenizer=GENERAL_TOKENIZER_DIR
    ) | dict(provenance)
    (dest / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _method_vectors(
    method: InitMethod, w2v_dir: Path, listed: list[str], new: NewWords, general: GeneralTokenizer, progress: Progress
) -> tuple[VectorRows | None, np.ndarray | None, np.ndarray | None]:
    """(the new words' vectors, the shared words' vectors, their ids): only what ``method`` needs, else None."""
    import numpy as np

    from greenadapt.adaptation.vectors import VectorRows, read_word2vec_rows

    if not method.needs_vectors:
        return None, None, None
    progress.start("reading word2vec vectors")
    shared_rows = [i for i, w in enumerate(listed) if general.word_id(w) is not None] if method.needs_shared_vectors else []
    # Only the new (and, for methods that need them, the shared) words' vectors: a capped run holds no more.
    words, selected = read_word2vec_rows(w2v_dir / "vectors.bin", new.w2v_rows + shared_rows)
    progress.finish()
    if words != listed:
        raise StageError(
            "vectors.bin and counts.tsv list different words",
            path=w2v_dir,
            hint="the w2v output is inconsistent; rerun `greenadapt w2v ... --force`",
        )
    n_new = len(new.w2v_rows)
    if not shared_rows:
        return selected, None, None
    shared_ids = np.array([general.word_id(listed[i]) for i in shared_rows], dtype=np.int64)
    index = np.arange(len(selected)) if selected.index is None else selected.index
    return VectorRows(selected.matrix, index[:n_new]), selected.chunk(n_new, len(selected)), shared_ids


# --------------------------------------------------------------------------
# A streaming safetensors writer


def run_expand(settings: ExpandSettings, run: Run) -> StageOutcome:
    """``greenadapt expand``: the stage from its settings."""
    return expand_stage(align=settings.align, corpus=list(settings.corpus or ()) or None, model=settings.model, rows=settings,
                        min_count=settings.min_count, seed=settings.seed, method=settings.method,
                        also_align=list(settings.also_align), run=run)
