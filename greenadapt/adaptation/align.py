"""``align``: map word2vec vectors into the model's wordpiece-embedding space.

The shared vocabulary is every WordPiece vocabulary entry that is also a
word2vec word (no filtering, as in Poerner et al., 2020). The method (see
:mod:`greenadapt.adaptation.methods`, one module each: lstsq, identity, random,
subword-mean, focus, hybrid) is fitted on those shared words and writes what
``expand`` needs to make the new rows.

Outputs: what the method writes (``map.npy``, W as float64 (d_model, d_w2v),
for lstsq, identity and hybrid; the Gaussian for random), ``report.json`` and
``manifest.json``. ``heldout_cosine`` is the mean cosine between the row the
method predicts for a shared word and the model's own row, over a fixed random
10% of the shared words, the method fitted on the other 90% (lstsq then refits
W on all shared words). A fit below :data:`LOW_HELDOUT_COSINE`, or fewer shared
words than dimensions, is warned about and recorded (``warnings``). The report also holds a neighbours
table like the paper's Table 2: for a few frequent new domain words and
any ``probes``, the nearest word2vec words (within-space) and the nearest
wordpiece embeddings to W·v (cross-space).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.artifacts import kinds
from greenadapt.artifacts.workspace import VARIANT_MARK
from greenadapt.adaptation.methods import DEFAULT_METHOD, InitMethod, get_method
from greenadapt.adaptation.methods.base import recorded_seed

# Kept importable from here: the map's helpers and file names now live with their methods.
from greenadapt.adaptation.methods.lstsq import MAP_FILE, fit_linear_map, mean_cosine  # noqa: E402,F401
from greenadapt.adaptation.methods.random import COV_FILE, MEAN_FILE, gaussian_rows  # noqa: E402,F401
from greenadapt.adaptation.neighbours import nearest_neighbours
from greenadapt.adaptation.stages import check_normalization, locate_upstream, model_for_stage, recorded_options, stage_suffix, vocab_digest
from greenadapt.artifacts.files import write_json
from greenadapt.artifacts.manifest import Manifest, load_stage, manifest_identity
from greenadapt.artifacts.stage import StageOutcome, StageRun
from greenadapt.defaults import DEFAULT_SEED
from greenadapt.errors import InputError
from greenadapt.progress import Progress
from greenadapt.options import DEFAULT_RUN, Run

if TYPE_CHECKING:
    from greenadapt.adaptation.settings import AlignSettings, MethodSettings
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer
    from greenadapt.artifacts.pretrained import ModelRef

log = logging.getLogger(__name__)

HELDOUT_FRACTION = 0.1
HELDOUT_SEED = 0  # fixed, so the held-out figures of two runs compare and lstsq's output does not depend on --seed
# Below this held-out cosine the map is close to noise (the generated `sample` gives 0.05, `go-text` 0.14 at the defaults;
# biomed-10m on MiniLM gives 0.26): warn, since the new rows will then carry little.
LOW_HELDOUT_COSINE = 0.2
SHARED_DIRECTION_COSINE = 0.5  # mean cosine between two words' vectors above which word2vec has not trained
REPORT_FILE = "report.json"


def align_stage(
    *,
    w2v: Path | None = None,
    corpus: Sequence[str] | None = None,
    model: str | None = None,
    method: str = DEFAULT_METHOD,
    method_options: MethodSettings | None = None,
    seed: int = DEFAULT_SEED,
    probes: Sequence[str] = (),
    run: Run = DEFAULT_RUN,
) -> StageOutcome:
    """Fit the map from the word2vec space of ``w2v`` (or ``corpus``'s w2v output) into ``model``'s embeddings.

    ``model`` defaults to the model the w2v manifest records. The output
    folder defaults to the ``align`` sibling of the w2v folder.
    """
    workdir, out, force, wait, progress = run.workdir, run.out, run.force, run.wait, run.progress
    from greenadapt.adaptation.domain_tokenizer import load_general_tokenizer
    from greenadapt.artifacts.destination import check_destination, protected

    chosen = get_method(method)
    if method_options is None:  # the methods' options at their declared defaults
        from greenadapt.adaptation.settings import AlignSettings

        method_options = AlignSettings()
    w2v_dir = locate_upstream("w2v", w2v, corpus, model, workdir)
    w2v_manifest = load_stage(w2v_dir, "w2v")
    ref = model_for_stage(model, w2v_manifest.section("config", "model") or None, w2v_dir)
    general = load_general_tokenizer(ref.path)
    check_normalization(general, w2v_manifest, w2v_dir, ref)

    # w2v+epochs-10 -> align+epochs-10: each word2vec configuration's fit beside its own vectors.
    variant = w2v_dir.name.partition(VARIANT_MARK)[2]
    default_name = f"align{stage_suffix(chosen, method_options)}" + (f"{VARIANT_MARK}{variant}" if variant else "")
    out_dir = Path(out) if out is not None else w2v_dir.parent / default_name
    check_destination(
        out_dir, kind="align", force=force, workspace=workdir,
        reads=[*protected("the --w2v input", w2v_dir), *protected("the base --model", ref.path)],
    )
    # The held-out split has its own fixed seed: only a seeded method's output depends on --seed.
    config = {"method": method, "seed": recorded_seed(chosen, seed), "probes": list(probes), "model": ref.identity()}
    if recorded_options(chosen, method_options):
        # Only when they matter, so that the outputs of the plain paper method keep their fingerprints.
        config["method_options"] = recorded_options(chosen, method_options)
    inputs = [manifest_identity(w2v_dir, w2v_manifest), ref.identity()]
    from greenadapt.artifacts.model_weights import weight_libraries

    libraries = ("numpy", "scipy", "safetensors", "tokenizers", *weight_libraries(ref.path))
    with StageRun(kinds.ALIGN, out_dir, config, inputs, force=force, wait=wait, libraries=libraries) as stage:
        if stage.skipped:
            assert stage.manifest is not None
            return StageOutcome(stage.out, stage.manifest, True, stage.skip_reason)
        report = _align(
            w2v_dir, w2v_manifest, ref, general, method=chosen, options=method_options, seed=seed, probes=probes, dest=stage.tmp,
            progress=progress,
        )
        stats = {k: v for k, v in report.items() if k != "neighbours"}
        manifest = stage.commit(stats=stats)
    log.info(
        "align: %d shared words, %d new; held-out cosine %s -> %s",
        report["n_shared"],
        report["n_new"],
        report["heldout_cosine"],
        stage.out,
    )
    return StageOutcome(stage.out, manifest, False)


# --------------------------------------------------------------------------
# Finding inputs (shared with expand)


# --------------------------------------------------------------------------
# The work


def _checked_vector_source(w2v_dir: Path, w2v_manifest: Manifest, method: InitMethod) -> str:
    """What the w2v folder's vectors come from (word2vec or context), refused when the method needs another kind."""
    source = vector_source(w2v_manifest)
    if method.vector_source == "context" and source != "context":
        raise InputError(
            f"--method {method.name} needs the base model's contextual vectors, and this w2v output holds {source} vectors",
            path=w2v_dir,
            hint="run `greenadapt adapt --method context-mean`, or `greenadapt w2v --source context` first",
        )
    return source


def heldout_split(n_shared: int) -> tuple[Any, Any]:
    """(held-out, training) indices of the shared words: a seeded HELDOUT_FRACTION held out, at least one of each."""
    import numpy as np

    order = np.random.default_rng(HELDOUT_SEED).permutation(n_shared)
    n_held = 0 if n_shared < 2 else min(max(1, round(n_shared * HELDOUT_FRACTION)), n_shared - 1)
    return order[:n_held], order[n_held:]


def _read_inputs(w2v_dir: Path, ref: ModelRef, general: GeneralTokenizer, method: InitMethod,
                 progress: Progress) -> tuple[list[str], Any, Any]:
    """The word2vec words and vectors, and the model's input embeddings (checked against its tokenizer)."""
    from greenadapt.artifacts.model_weights import read_input_embeddings

    progress.start("reading word2vec vectors")
    words, vectors = read_w2v_words(w2v_dir, need_vectors=method.needs_vectors, method=method.name)
    progress.finish()
    embeddings = read_input_embeddings(ref.path)
    n_rows = embeddings.shape[0]
    if general.size > n_rows:
        raise InputError(
            f"the tokenizer has ids up to {general.size - 1} but the embedding matrix only {n_rows} rows",
            path=ref.path,
            hint="the model folder's tokenizer and weights do not belong together",
        )
    return words, vectors, embeddings


def _checked_shared_words(words: list[str], general: GeneralTokenizer, method: InitMethod, ref: ModelRef,
                          w2v_dir: Path) -> tuple[list[int], list[int], int]:
    w2v_rows, vocab_ids, n_new = shared_words(words, general)
    if not w2v_rows and method.needs_vectors:
        raise InputError(
            f"no word2vec word is an entry of the vocabulary of {ref.name} (empty shared vocabulary)",
            path=w2v_dir / "vectors.bin",
            hint="train w2v with this model's tokenizer (same casing), or pass the --model w2v used",
        )
    return w2v_rows, vocab_ids, n_new


def _neighbour_rows(
    w2v_dir: Path, dest: Path, fitted: dict[str, Any], words: list[str], vectors: Any, embeddings: Any, general: GeneralTokenizer,
    probes: Sequence[str]
) -> list[dict[str, Any]]:
    """The report's neighbour table, with the fitted map (when the method has one) for the cross-space column."""
    import numpy as np

    from greenadapt.adaptation.vectors import read_counts

    W = np.load(dest / fitted["map_file"], allow_pickle=False) if fitted.get("map_file") else None
    counts = read_counts(w2v_dir / "counts.tsv") if (w2v_dir / "counts.tsv").is_file() else {}
    return nearest_neighbours(words, vectors, counts, embeddings, general, W, probes)


def _align(
    w2v_dir: Path,
    w2v_manifest: Manifest,
    ref: ModelRef,
    general: GeneralTokenizer,
    *,
    method: InitMethod,
    options: MethodSettings,
    seed: int,
    probes: Sequence[str],
    dest: Path,
    progress: Progress,
) -> dict[str, Any]:
    from greenadapt.adaptation.methods import FitContext
    from greenadapt.adaptation.methods.base import describe

    source = _checked_vector_source(w2v_dir, w2v_manifest, method)
    words, vectors, embeddings = _read_inputs(w2v_dir, ref, general, method, progress)
    (n_rows, d_model), d_w2v = embeddings.shape, vectors.shape[1]

    w2v_rows, vocab_ids, n_new = _checked_shared_words(words, general, method, ref, w2v_dir)
    n_shared = len(w2v_rows)
    X = vectors[w2v_rows]
    Y = embeddings[vocab_ids]
    held, train = heldout_split(n_shared)
    n_held = len(held)

    progress.start(f"fitting the map ({method.name})")
    fitted = method.fit(FitContext(X=X, Y=Y, train=train, held=held, seed=seed, options=options, dest=dest, embeddings=embeddings))
    progress.finish()
    held_cos, train_cos = fitted.pop("heldout_cosine", None), fitted.pop("train_cosine", None)
    shared_direction = mean_pairwise_cosine(vectors) if d_w2v else None
    warnings = fit_warnings(held_cos, n_shared, d_w2v if method.needs_vectors else 0, ref.name, shared_direction)
    for warning in warnings:
        log.warning("align: %s", warning)

    # After the fit, whose float64 copies are the stage's other large allocation: the two never coexist.
    neighbours = _neighbour_rows(w2v_dir, dest, fitted, words, vectors, embeddings, general, probes) if d_w2v else []
    report: dict[str, Any] = {
        "method": method.name,
        "method_description": describe(method, options),
        "word2vec_trained": source == "word2vec",
        "vector_source": source,
        "n_shared": n_shared,
        "n_new": n_new,
        "n_w2v": len(words),
        "d_model": d_model,
        "d_w2v": d_w2v,
        "heldout_cosine": _round(held_cos),
        "w2v_mean_cosine": _round(shared_direction),
        "train_cosine": _round(train_cos),
        "heldout_fraction": HELDOUT_FRACTION,
        "n_heldout": int(n_held),
        "n_train": int(len(train)),
        "seed": recorded_seed(method, seed),
        "heldout_seed": HELDOUT_SEED,
        "solver": None,
        "condition_number": None,
        **fitted,
        "warnings": warnings,
        "vocab_size": n_rows,
        "vocab_digest": vocab_digest(general),
        "map_file": fitted.get("map_file"),
        "map_dtype": fitted.get("map_dtype"),
        "neighbours": neighbours,
    }
    write_json(dest / REPORT_FILE, report)
    return report


def neighbours_of(align_dir: Path) -> list[dict[str, Any]]:
    """The neighbours table of an align folder's ``report.json`` (the most frequent new words first); empty
    when the report is missing or damaged: it only feeds displays, and the stage's checksums guard the rest."""
    try:
        report = json.loads((Path(align_dir) / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        log.warning("%s: the neighbours table cannot be read (%s)", Path(align_dir) / REPORT_FILE, error)
        return []
    rows = report.get("neighbours") if isinstance(report, dict) else None
    return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []


def vector_source(w2v_manifest: Mapping[str, Any]) -> str:
    """What a w2v output's vectors are: "word2vec", "context" or "none" (counts only)."""
    recorded = Manifest.of(w2v_manifest).config.get("vectors", True)
    return "none" if recorded is False else "context" if recorded == "context" else "word2vec"


def shared_words(words: Sequence[str], general: GeneralTokenizer) -> tuple[list[int], list[int], int]:
    """(rows of the words that are vocabulary entries, their vocabulary ids, how many words are new)."""
    w2v_rows, vocab_ids = [], []
    n_new = 0
    for index, word in enumerate(words):
        token_id = general.word_id(word)
        if token_id is not None:
            w2v_rows.append(index)
            vocab_ids.append(token_id)
        elif word not in general.added:
            n_new += 1
    return w2v_rows, vocab_ids, n_new


def read_w2v_words(w2v_dir: Path, *, need_vectors: bool, method: str) -> tuple[list[str], np.ndarray]:
    """The w2v output's words and vectors; a counts-only output (no word2vec trained) gives (n, 0) vectors."""
    import numpy as np

    from greenadapt.adaptation.vectors import read_counts, read_word2vec_binary

    if (w2v_dir / "vectors.bin").is_file():
        return read_word2vec_binary(w2v_dir / "vectors.bin")
    if need_vectors:
        raise InputError(
            f"--method {method} needs word vectors, but this w2v output holds word counts only (no word2vec was trained)",
            path=w2v_dir,
            hint="rerun `greenadapt w2v` without --no-vectors, or choose a method that needs none (subword-mean, random)",
        )
    words = list(read_counts(w2v_dir / "counts.tsv"))
    return words, np.zeros((len(words), 0), dtype=np.float32)


def mean_pairwise_cosine(vectors: np.ndarray, chunk: int = 65536) -> float:
    """The mean cosine between two different words' vectors, in one pass over the rows without a copy of them.

    The mean of n unit vectors u has |mean|² = (n + Σ_{i≠j} u_i·u_j) / n², so the mean over pairs is
    (n·|mean|² − 1) / (n − 1). About 0 for trained word2vec; near 1 when training was too short to
    move the vectors away from the direction they all drift in first.
    """
    import numpy as np

    n = len(vectors)
    if n < 2:
        return 0.0
    total = np.zeros(vectors.shape[1], dtype=np.float64)
    for start in range(0, n, chunk):
        block = vectors[start : start + chunk].astype(np.float64)
        total += (block / np.maximum(np.linalg.norm(block, axis=1, keepdims=True), 1e-12)).sum(axis=0)
    mean = total / n
    return float((n * (mean @ mean) - 1) / (n - 1))


def fit_warnings(heldout_cosine: float | None, n_shared: int, d_w2v: int, model: str, shared_direction: float | None = None) -> list[str]:
    """What a person should know about a fit that will make poor rows (recorded in the manifest and report)."""
    warnings = []
    if heldout_cosine is not None and heldout_cosine < LOW_HELDOUT_COSINE:
        warnings.append(
            f"held-out cosine {heldout_cosine:.3f} is below {LOW_HELDOUT_COSINE}: the map is close to noise, so the "
            "new rows will carry little. Likely causes: a corpus too small for word2vec (3 million tokens at the "
            "defaults; below that, w2v --dim 100 --epochs 15 took 853k biomedical tokens from 0.15 to 0.26: "
            f"docs/corpus-size.md), a --model other than the one w2v was trained for ({model}), or a tokenization mismatch"
        )
    if 0 < n_shared < d_w2v:
        warnings.append(
            f"only {n_shared} shared words for {d_w2v} dimensions: the map is underdetermined (a larger corpus, "
            "a lower --w2v-min-count or a smaller --dim)"
        )
    if shared_direction is not None and shared_direction > SHARED_DIRECTION_COSINE:
        warnings.append(
            f"the word2vec vectors share one direction (mean cosine between two words {shared_direction:.2f}): too little "
            "text or too few epochs for word2vec, so every word looks near every other (neighbour cosines about 1.00) "
            "and the map has little to carry; use more text or more --epochs (docs/corpus-size.md)"
        )
    return warnings


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def run_align(settings: AlignSettings, run: Run) -> StageOutcome:
    """``greenadapt align``: the stage from its settings."""
    return align_stage(w2v=settings.w2v, corpus=list(settings.corpus or ()) or None, model=settings.model, method=settings.method,
                       method_options=settings, seed=settings.seed, probes=settings.probe, run=run)
