"""``align``: map word2vec vectors into the model's wordpiece-embedding space.

The shared vocabulary is every WordPiece vocabulary entry that is also a
word2vec word (no filtering, as in Poerner et al., 2020). The method (see
:mod:`greenadapt.methods`, one module each: lstsq, identity, random,
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

import hashlib
import heapq
import itertools
import logging
import operator
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.defaults import DEFAULT_SEED
from greenadapt.errors import InputError, StageError, UsageError
from greenadapt.methods import InitMethod, MethodOptions, get_method
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.manifest import Manifest, load_stage, manifest_identity, write_json
from greenadapt.stage import StageOutcome, StageRun

# Kept importable from here: the map's helpers and file names now live with their methods.
from greenadapt.methods.lstsq import MAP_FILE, fit_linear_map, mean_cosine  # noqa: E402,F401
from greenadapt.methods.random import COV_FILE, MEAN_FILE, gaussian_rows  # noqa: E402,F401

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.domain_tokenizer import GeneralTokenizer
    from greenadapt.models import ModelRef

log = logging.getLogger(__name__)

HELDOUT_FRACTION = 0.1
HELDOUT_SEED = 0  # fixed, so the held-out figures of two runs compare and lstsq's output does not depend on --seed
# Below this held-out cosine the map is close to noise (the bundled 2k-sentence sample gives 0.07;
# biomed-10m on MiniLM gives 0.26): warn, since the new rows will then carry little.
LOW_HELDOUT_COSINE = 0.2
SHARED_DIRECTION_COSINE = 0.5  # mean cosine between two words' vectors above which word2vec has not trained
N_FREQUENT = 10
N_NEIGHBOURS = 5
MIN_TABLE_WORD_LEN = 6
REPORT_FILE = "report.json"


def run_align(
    *,
    w2v: Path | None = None,
    corpus: Sequence[str] | None = None,
    model: str | None = None,
    method: str = "lstsq",
    method_options: MethodOptions | None = None,
    seed: int = DEFAULT_SEED,
    probes: Sequence[str] = (),
    workdir: Path | None = None,
    out: Path | None = None,
    force: bool = False,
    wait: bool = False,
    progress: Progress = NULL_PROGRESS,
) -> StageOutcome:
    """Fit the map from the word2vec space of ``w2v`` (or ``corpus``'s w2v output) into ``model``'s embeddings.

    ``model`` defaults to the model the w2v manifest records. The output
    folder defaults to the ``align`` sibling of the w2v folder.
    """
    from greenadapt.destination import check_destination, protected
    from greenadapt.domain_tokenizer import load_general_tokenizer

    chosen = get_method(method)
    method_options = method_options or MethodOptions()
    method_options.check()
    w2v_dir = locate_upstream("w2v", w2v, corpus, model, workdir)
    w2v_manifest = load_stage(w2v_dir, "w2v")
    ref = model_for_stage(model, w2v_manifest.section("config", "model") or None, w2v_dir)
    general = load_general_tokenizer(ref.path)
    check_normalization(general, w2v_manifest, w2v_dir, ref)

    out_dir = Path(out) if out is not None else w2v_dir.parent / f"align{stage_suffix(chosen, method_options)}"
    check_destination(
        out_dir, kind="align", force=force, workspace=workdir,
        reads=[*protected("the --w2v input", w2v_dir), *protected("the base --model", ref.path)],
    )
    # lstsq and identity are deterministic (the held-out split has its own fixed seed): a seed change must not
    # redo them, nor make a later stage refuse their output as "made with other options".
    config = {"method": method, "seed": seed if method == "random" else None, "probes": list(probes), "model": ref.identity()}
    if recorded_options(chosen, method_options):
        # Only when they matter, so that the outputs of the plain paper method keep their fingerprints.
        config["method_options"] = recorded_options(chosen, method_options)
    inputs = [manifest_identity(w2v_dir, w2v_manifest), ref.identity()]
    libraries = ("numpy", "scipy", "safetensors", "tokenizers", "transformers")
    with StageRun("align", out_dir, config, inputs, force=force, wait=wait, libraries=libraries) as run:
        if run.skipped:
            assert run.manifest is not None
            return StageOutcome(run.out, run.manifest, True, run.skip_reason)
        report = _align(
            w2v_dir, w2v_manifest, ref, general, method=chosen, options=method_options, seed=seed, probes=probes, dest=run.tmp,
            progress=progress,
        )
        stats = {k: v for k, v in report.items() if k != "neighbours"}
        manifest = run.commit(stats=stats)
    log.info(
        "align: %d shared words, %d new; held-out cosine %s -> %s",
        report["n_shared"],
        report["n_new"],
        report["heldout_cosine"],
        run.out,
    )
    return StageOutcome(run.out, manifest, False)


# --------------------------------------------------------------------------
# Finding inputs (shared with expand)


def locate_upstream(
    kind: str,
    explicit: Path | None,
    corpus: Sequence[str] | None,
    model: str | None,
    workdir: Path | None,
) -> Path:
    """The folder of upstream stage ``kind``: given explicitly, or found in the workspace by corpus (and model)."""
    from greenadapt.models import resolve_model
    from greenadapt.workspace import find_stage_dir, workdir as workspace_root

    if explicit is not None and corpus:
        raise UsageError(f"pass either --{kind} or --corpus, not both")
    if explicit is not None:
        return Path(explicit)
    if not corpus:
        raise UsageError("no input given", hint=f"pass --{kind} DIR, or --corpus NAME to find it in the workspace")
    slug = resolve_model(model).slug if model else None
    return find_stage_dir(workspace_root(workdir), list(corpus), slug, kind)


def model_for_stage(spec: str | None, recorded: Any, stage_dir: Path) -> ModelRef:
    """``--model`` if given, else the model an upstream manifest recorded (its ``ModelRef.identity()``)."""
    from greenadapt.models import DEFAULT_MODEL_NAME, ModelRef, resolve_model

    if spec:
        return resolve_model(spec)
    if not isinstance(recorded, Mapping) or not recorded.get("model"):
        raise StageError(
            "the upstream manifest does not record which model it was made for",
            path=stage_dir / "manifest.json",
            hint="pass --model",
        )
    path = Path(str(recorded.get("path", "")))
    if recorded.get("path") and (path / "config.json").is_file():
        return ModelRef(str(recorded["model"]), path)
    name = str(recorded["model"])
    log.info("model folder %s is gone; resolving %s again", path, name)
    return resolve_model(None if name == DEFAULT_MODEL_NAME else name)


def check_normalization(general: GeneralTokenizer, w2v_manifest: Manifest, w2v_dir: Path, ref: ModelRef) -> None:
    """The word2vec words must be normalized exactly as the model normalizes text."""
    config = w2v_manifest.config
    if "lowercase" not in config:
        log.warning("%s records no normalization; assuming it matches %s", w2v_dir, ref.name)
        return
    lowercase = bool(config["lowercase"])
    strip = config.get("strip_accents")
    used = {"lowercase": lowercase, "strip_accents": lowercase if strip is None else bool(strip)}
    wanted = general.normalization()
    if used != wanted:
        raise InputError(
            f"word2vec was trained on text normalized with {_describe(used)}, "
            f"but model {ref.name} normalizes with {_describe(wanted)}",
            path=w2v_dir,
            hint=f"rerun `greenadapt w2v --model {ref.name}`, or pass the --model that w2v used",
        )


def _describe(norm: Mapping[str, bool]) -> str:
    return f"lowercase={norm['lowercase']}, strip_accents={norm['strip_accents']}"


def vocab_digest(general: GeneralTokenizer) -> str:
    """Names the tokenizer's vocabulary, so expand can tell whether a model matches the one aligned to."""
    entries = sorted((i, t) for t, i in list(general.vocab.items()) + list(general.added.items()))
    return hashlib.sha256("\n".join(f"{i}\t{t}" for i, t in entries).encode("utf-8")).hexdigest()[:16]


# --------------------------------------------------------------------------
# The work


def stage_suffix(method: InitMethod, options: MethodOptions) -> str:
    """How the default align and expand folders of a method are told apart: "" for the paper's lstsq,
    ``-focus``, ``-lstsq-match-norm``, ``-focus-<hash of its options>`` when they differ from the defaults."""
    from greenadapt.manifest import canonical_json

    chosen = recorded_options(method, options)
    norm = "-match-norm" if chosen.pop("match_norm", False) else ""
    name = "" if method.name == "lstsq" and not norm else f"-{method.name}"
    if chosen == recorded_options(method, MethodOptions()):
        return f"{name}{norm}"
    return f"{name}{norm}-{hashlib.sha256(canonical_json(chosen).encode()).hexdigest()[:8]}"


def recorded_options(method: InitMethod, options: MethodOptions) -> dict[str, Any]:
    """The method options align's config records: those the method uses, and --match-norm when on."""
    chosen = options.for_method(method)
    if not chosen.get("match_norm"):
        chosen.pop("match_norm", None)
    return chosen


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


def _align(
    w2v_dir: Path,
    w2v_manifest: Manifest,
    ref: ModelRef,
    general: GeneralTokenizer,
    *,
    method: InitMethod,
    options: MethodOptions,
    seed: int,
    probes: Sequence[str],
    dest: Path,
    progress: Progress,
) -> dict[str, Any]:
    import numpy as np

    from greenadapt.methods import FitContext
    from greenadapt.methods.base import describe
    from greenadapt.vectors import read_counts, read_input_embeddings

    source = _checked_vector_source(w2v_dir, w2v_manifest, method)
    progress.start("reading word2vec vectors")
    words, vectors = read_w2v_words(w2v_dir, need_vectors=method.needs_vectors, method=method.name)
    progress.finish()
    embeddings = read_input_embeddings(ref.path)
    n_rows, d_model = embeddings.shape
    d_w2v = vectors.shape[1]
    if general.size > n_rows:
        raise InputError(
            f"the tokenizer has ids up to {general.size - 1} but the embedding matrix only {n_rows} rows",
            path=ref.path,
            hint="the model folder's tokenizer and weights do not belong together",
        )

    w2v_rows, vocab_ids, n_new = shared_words(words, general)
    n_shared = len(w2v_rows)
    if n_shared == 0 and method.needs_vectors:
        raise InputError(
            f"no word2vec word is an entry of the vocabulary of {ref.name} (empty shared vocabulary)",
            path=w2v_dir / "vectors.bin",
            hint="train w2v with this model's tokenizer (same casing), or pass the --model w2v used",
        )
    X = vectors[w2v_rows]
    Y = embeddings[vocab_ids]
    held, train = heldout_split(n_shared)
    n_held = len(held)

    progress.start(f"fitting the map ({method.name})")
    fitted = method.fit(FitContext(X=X, Y=Y, train=train, held=held, seed=seed, options=options, dest=dest, embeddings=embeddings))
    progress.finish()
    held_cos, train_cos = fitted.pop("heldout_cosine", None), fitted.pop("train_cosine", None)
    warnings = fit_warnings(held_cos, n_shared, d_w2v if method.needs_vectors else 0, ref.name)
    shared_direction = mean_pairwise_cosine(vectors) if d_w2v else None
    if shared_direction is not None and shared_direction > SHARED_DIRECTION_COSINE:
        warnings.append(
            f"the word2vec vectors share one direction (mean cosine between two words {shared_direction:.2f}): too little "
            "text or too few epochs for word2vec, so every word looks near every other (neighbour cosines about 1.00) "
            "and the map has little to carry; use more text or more --epochs (docs/corpus-size.md)"
        )
    for warning in warnings:
        log.warning("align: %s", warning)

    W = np.load(dest / fitted["map_file"], allow_pickle=False) if fitted.get("map_file") else None
    # Read after the fit, whose float64 copies are the stage's other large allocation: the two never coexist.
    counts = read_counts(w2v_dir / "counts.tsv") if (w2v_dir / "counts.tsv").is_file() else {}
    neighbours = _neighbours(words, vectors, counts, embeddings, general, W, probes) if d_w2v else []

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
        "seed": seed if method.name == "random" else None,
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


def vector_source(w2v_manifest: Mapping[str, Any]) -> str:
    """What a w2v output's vectors are: "word2vec", "context" or "none" (counts only)."""
    recorded = Manifest.of(w2v_manifest).config.get("vectors", True)
    return "none" if recorded is False else "context" if recorded == "context" else "word2vec"


def _neighbours(
    words: Sequence[str], vectors: np.ndarray, counts: Mapping[str, int], embeddings: np.ndarray,
    general: GeneralTokenizer, W: np.ndarray | None, probes: Sequence[str],
) -> list[dict[str, Any]]:
    """The neighbour table of the most frequent new words and the probes."""
    table_words = frequent_new_words(general, words, counts) + [general.normalize(p).strip() for p in probes]
    kinds = ["frequent"] * (len(table_words) - len(probes)) + ["probe"] * len(probes)
    return neighbour_table(words, vectors, counts, embeddings, general, W, table_words, kinds)


def shared_words(words: Sequence[str], general: GeneralTokenizer) -> tuple[list[int], list[int], int]:
    """(rows of the words that are vocabulary entries, their vocabulary ids, how many words are new)."""
    w2v_rows, vocab_ids = [], []
    n_new = 0
    for index, word in enumerate(words):
        token_id = general.vocab.get(word)
        if token_id is not None:
            w2v_rows.append(index)
            vocab_ids.append(token_id)
        elif word not in general.added:
            n_new += 1
    return w2v_rows, vocab_ids, n_new


def read_w2v_words(w2v_dir: Path, *, need_vectors: bool, method: str) -> tuple[list[str], np.ndarray]:
    """The w2v output's words and vectors; a counts-only output (no word2vec trained) gives (n, 0) vectors."""
    import numpy as np

    from greenadapt.vectors import read_counts, read_word2vec_binary

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


def fit_warnings(heldout_cosine: float | None, n_shared: int, d_w2v: int, model: str) -> list[str]:
    """What a person should know about a fit that will make poor rows (recorded in the manifest and report)."""
    warnings = []
    if heldout_cosine is not None and heldout_cosine < LOW_HELDOUT_COSINE:
        warnings.append(
            f"held-out cosine {heldout_cosine:.3f} is below {LOW_HELDOUT_COSINE}: the map is close to noise, so the "
            "new rows will carry little. Likely causes: a corpus too small for word2vec (millions of tokens are "
            f"needed), a --model other than the one w2v was trained for ({model}), or a tokenization mismatch"
        )
    if 0 < n_shared < d_w2v:
        warnings.append(
            f"only {n_shared} shared words for {d_w2v} dimensions: the map is underdetermined (a larger corpus, "
            "a lower --min-count or a smaller --dim)"
        )
    return warnings


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def frequent_new_words(general: GeneralTokenizer, words: Sequence[str], counts: Mapping[str, int]) -> list[str]:
    """The most frequent new words that look like domain words (alphabetic, at least 6 letters)."""
    def candidates() -> Iterator[str]:
        return (w for w in words if len(w) >= MIN_TABLE_WORD_LEN and w.isalpha() and not general.is_known(w))

    if not counts:
        return list(itertools.islice(candidates(), N_FREQUENT))
    in_file_order = list(counts) == list(words)
    values = list(counts.values()) if in_file_order else []
    if in_file_order and all(map(operator.ge, values, values[1:])):
        # w2v writes its words most frequent first: the table's words are the first candidates, plus any tied
        # with the last of them, found without looking at the rest of a million words.
        head: list[str] = []
        for word in candidates():
            if len(head) >= N_FREQUENT and counts[word] < counts[head[N_FREQUENT - 1]]:
                break
            head.append(word)
        return sorted(head, key=lambda w: (-counts[w], w))[:N_FREQUENT]
    # The first N_FREQUENT of (-count, word) order without sorting a million words.
    return heapq.nsmallest(N_FREQUENT, candidates(), key=lambda w: (-counts.get(w, 0), w))


def neighbour_table(
    words: Sequence[str],
    vectors: np.ndarray,
    counts: Mapping[str, int],
    embeddings: np.ndarray,
    general: GeneralTokenizer,
    W: np.ndarray | None,
    table_words: Sequence[str],
    kinds: Sequence[str],
) -> list[dict[str, Any]]:
    """Within-space word2vec neighbours and cross-space wordpiece neighbours of W·v (paper, Table 2)."""
    import numpy as np

    wanted = set(table_words)
    index = {w: i for i, w in enumerate(words) if w in wanted}
    present = [w for w in table_words if w in index]
    rows: list[dict[str, Any]] = []
    within: dict[str, list[list[Any]]] = {}
    cross: dict[str, list[list[Any]]] = {}
    if present:
        queries = vectors[[index[w] for w in present]].astype(np.float32)
        norms = np.maximum(np.sqrt(np.einsum("ij,ij->i", vectors, vectors)), 1e-12)
        # Divided in place: a million words × the queries of cosines exist once, not three times.
        sims = vectors @ queries.T
        sims /= norms[:, None]
        sims /= norms[[index[w] for w in present]]
        for j, word in enumerate(present):
            sims[index[word], j] = -np.inf
            within[word] = _top(sims[:, j], lambda i: words[i])
        if W is not None:
            id_to_token = {i: t for t, i in general.vocab.items()}
            usable = np.array([not _is_bracketed(id_to_token.get(i, "[]")) for i in range(len(embeddings))])
            unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
            mapped = queries @ W.T.astype(np.float32)
            mapped /= np.maximum(np.linalg.norm(mapped, axis=1, keepdims=True), 1e-12)
            cross_sims = unit @ mapped.T
            cross_sims[~usable] = -np.inf
            for j, word in enumerate(present):
                cross[word] = _top(cross_sims[:, j], lambda i: id_to_token[i])
    for word, kind in zip(table_words, kinds):
        rows.append(
            {
                "word": word,
                "kind": kind,
                "count": counts.get(word),
                "in_w2v": word in index,
                "in_vocab": general.is_known(word),
                "within": within.get(word, []),
                "cross": cross.get(word, []),
            }
        )
    return rows


def _top(scores: np.ndarray, name: Any) -> list[list[Any]]:
    import numpy as np

    k = min(N_NEIGHBOURS, int(np.isfinite(scores).sum()))
    if k == 0:
        return []
    best = np.argpartition(-scores, k - 1)[:k]
    best = best[np.argsort(-scores[best], kind="stable")]
    return [[name(int(i)), round(float(scores[i]), 4)] for i in best]


def _is_bracketed(token: str) -> bool:
    return token.startswith("[") and token.endswith("]")
