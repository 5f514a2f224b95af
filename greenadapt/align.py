"""``align``: map word2vec vectors into the model's wordpiece-embedding space.

The shared vocabulary is every WordPiece vocabulary entry that is also a
word2vec word (no filtering, as in Poerner et al., 2020). Methods:

``lstsq`` (default)
    The unconstrained linear map W (d_model × d_w2v) minimising
    ``||X Wᵀ - Y||²`` over the shared words (X: word2vec vectors, Y: the
    model's input embeddings). Solved by the normal equations in float64
    with a ridge of ``1e-9 × mean eigenvalue`` (a few times faster than an
    SVD-based solver, equally accurate when well conditioned); when
    ``XᵀX`` is ill conditioned (condition number above 1e10) or there are
    fewer shared words than dimensions, ``numpy.linalg.lstsq`` instead.
``identity``
    W = I, the paper's "no alignment" ablation; needs d_w2v == d_model.
``random``
    The paper's random-vector ablation: new rows drawn from a Gaussian
    with the embedding matrix's mean and covariance (``gaussian_mean.npy``,
    ``gaussian_cov.npy``); ``expand`` draws them with its ``--seed``.

Outputs: ``map.npy`` (W, float64, shape (d_model, d_w2v); not written for
``random``), ``report.json`` and ``manifest.json``. ``heldout_cosine`` is
the mean cosine between W·v and the model's own embedding over a seeded
random 10% of the shared words, W fitted on the other 90%; the saved W is
then refitted on all shared words. The report also holds a neighbours
table like the paper's Table 2: for a few frequent new domain words and
any ``probes``, the nearest word2vec words (within-space) and the nearest
wordpiece embeddings to W·v (cross-space).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greenadapt.errors import InputError, StageError, UsageError
from greenadapt.progress import NULL_PROGRESS, Progress
from greenadapt.stage import StageOutcome, StageRun, load_stage, manifest_identity, write_json

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.domain_tokenizer import GeneralTokenizer
    from greenadapt.models import ModelRef

log = logging.getLogger(__name__)

METHODS = ("lstsq", "identity", "random")
HELDOUT_FRACTION = 0.1
RIDGE = 1e-9
MAX_CONDITION = 1e10
N_FREQUENT = 5
N_NEIGHBOURS = 5
MIN_TABLE_WORD_LEN = 6
MAP_FILE = "map.npy"
MEAN_FILE = "gaussian_mean.npy"
COV_FILE = "gaussian_cov.npy"
REPORT_FILE = "report.json"
_SAMPLE_CHUNK = 65536


def run_align(
    *,
    w2v: Path | None = None,
    corpus: Sequence[str] | None = None,
    model: str | None = None,
    method: str = "lstsq",
    seed: int = 0,
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
    from greenadapt.domain_tokenizer import load_general_tokenizer

    if method not in METHODS:
        raise UsageError(f"unknown --method {method!r}", hint=f"choose one of {', '.join(METHODS)}")
    w2v_dir = locate_upstream("w2v", w2v, corpus, model, workdir)
    w2v_manifest = load_stage(w2v_dir, "w2v")
    ref = model_for_stage(model, w2v_manifest.get("config", {}).get("model"), w2v_dir)
    general = load_general_tokenizer(ref.path)
    check_normalization(general, w2v_manifest, w2v_dir, ref)

    out_dir = Path(out) if out is not None else w2v_dir.parent / "align"
    config = {"method": method, "seed": seed, "probes": list(probes), "model": ref.identity()}
    inputs = [manifest_identity(w2v_dir, w2v_manifest), ref.identity()]
    libraries = ("numpy", "scipy", "safetensors", "tokenizers", "transformers")
    with StageRun("align", out_dir, config, inputs, force=force, wait=wait, libraries=libraries) as run:
        if run.skipped:
            assert run.manifest is not None
            return StageOutcome(run.out, run.manifest, True, run.skip_reason)
        report = _align(w2v_dir, ref, general, method=method, seed=seed, probes=probes, dest=run.tmp, progress=progress)
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


def check_normalization(general: GeneralTokenizer, w2v_manifest: Mapping[str, Any], w2v_dir: Path, ref: ModelRef) -> None:
    """The word2vec words must be normalized exactly as the model normalizes text."""
    config = w2v_manifest.get("config", {})
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


def _align(
    w2v_dir: Path,
    ref: ModelRef,
    general: GeneralTokenizer,
    *,
    method: str,
    seed: int,
    probes: Sequence[str],
    dest: Path,
    progress: Progress,
) -> dict[str, Any]:
    import numpy as np

    from greenadapt.vectors import read_counts, read_input_embeddings, read_word2vec_binary

    progress.start("reading word2vec vectors")
    words, vectors = read_word2vec_binary(w2v_dir / "vectors.bin")
    counts = read_counts(w2v_dir / "counts.tsv") if (w2v_dir / "counts.tsv").is_file() else {}
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

    w2v_rows, vocab_ids = [], []
    n_new = 0
    for index, word in enumerate(words):
        token_id = general.vocab.get(word)
        if token_id is not None:
            w2v_rows.append(index)
            vocab_ids.append(token_id)
        elif word not in general.added:
            n_new += 1
    n_shared = len(w2v_rows)
    if n_shared == 0:
        raise InputError(
            f"no word2vec word is an entry of the vocabulary of {ref.name} (empty shared vocabulary)",
            path=w2v_dir / "vectors.bin",
            hint="train w2v with this model's tokenizer (same casing), or pass the --model w2v used",
        )
    if method == "identity" and d_w2v != d_model:
        raise InputError(
            f"--method identity needs word2vec vectors of the model's embedding size {d_model}, they have {d_w2v}",
            path=w2v_dir / "vectors.bin",
            hint=f"use --method lstsq, or rerun w2v with --dim {d_model}",
        )
    X = vectors[w2v_rows]
    Y = embeddings[vocab_ids]

    rng = np.random.default_rng(seed)
    order = rng.permutation(n_shared)
    n_held = 0 if n_shared < 2 else min(max(1, round(n_shared * HELDOUT_FRACTION)), n_shared - 1)
    held, train = order[:n_held], order[n_held:]

    progress.start(f"fitting the map ({method})")
    fit_info: dict[str, Any] = {"solver": None, "condition_number": None}
    W: np.ndarray | None = None
    if method == "lstsq":
        W_train, _ = fit_linear_map(X[train], Y[train])
        train_cos = mean_cosine(X[train] @ W_train.T, Y[train])
        held_cos = mean_cosine(X[held] @ W_train.T, Y[held]) if n_held else None
        W, fit_info = fit_linear_map(X, Y)
        np.save(dest / MAP_FILE, W)
    elif method == "identity":
        W = np.eye(d_model)
        train_cos = mean_cosine(X[train], Y[train])
        held_cos = mean_cosine(X[held], Y[held]) if n_held else None
        np.save(dest / MAP_FILE, W)
    else:
        mean = embeddings.mean(axis=0, dtype=np.float64)
        cov = np.cov(embeddings, rowvar=False, dtype=np.float64)
        np.save(dest / MEAN_FILE, mean)
        np.save(dest / COV_FILE, cov)
        train_cos = None
        draws = np.concatenate(list(gaussian_rows(mean, cov, n_held, seed))) if n_held else None
        held_cos = mean_cosine(draws, Y[held]) if n_held else None
    progress.finish()
    if n_shared < d_w2v:
        log.warning("only %d shared words for %d dimensions: the map is underdetermined", n_shared, d_w2v)

    table_words = frequent_new_words(general, words, counts) + [general.normalize(p).strip() for p in probes]
    kinds = ["frequent"] * (len(table_words) - len(probes)) + ["probe"] * len(probes)
    neighbours = neighbour_table(words, vectors, counts, embeddings, general, W, table_words, kinds)

    report: dict[str, Any] = {
        "method": method,
        "n_shared": n_shared,
        "n_new": n_new,
        "n_w2v": len(words),
        "d_model": d_model,
        "d_w2v": d_w2v,
        "heldout_cosine": _round(held_cos),
        "train_cosine": _round(train_cos),
        "heldout_fraction": HELDOUT_FRACTION,
        "n_heldout": int(n_held),
        "n_train": int(len(train)),
        "seed": seed,
        **fit_info,
        "vocab_size": n_rows,
        "vocab_digest": vocab_digest(general),
        "map_file": MAP_FILE if W is not None else None,
        "map_dtype": "float64" if W is not None else None,
        "neighbours": neighbours,
    }
    write_json(dest / REPORT_FILE, report)
    return report


def _round(value: float | None) -> float | None:
    return None if value is None else round(float(value), 6)


def fit_linear_map(X: np.ndarray, Y: np.ndarray) -> tuple[np.ndarray, dict[str, Any]]:
    """W (d_y × d_x) minimising ``||X Wᵀ - Y||²``, in float64; see the module docstring for the solver."""
    import numpy as np
    import scipy.linalg

    X64 = np.asarray(X, dtype=np.float64)
    Y64 = np.asarray(Y, dtype=np.float64)
    n, d = X64.shape
    gram = X64.T @ X64
    eigenvalues = np.linalg.eigvalsh(gram)
    smallest, largest = float(eigenvalues[0]), float(eigenvalues[-1])
    condition = largest / smallest if smallest > 0 else float("inf")
    if n >= d and condition <= MAX_CONDITION:
        ridge = RIDGE * float(np.trace(gram)) / d
        gram[np.diag_indices(d)] += ridge
        Wt = scipy.linalg.solve(gram, X64.T @ Y64, assume_a="pos")
        solver = "normal_equations"
    else:
        log.info("XᵀX condition number %.3g: falling back to lstsq", condition)
        Wt = np.linalg.lstsq(X64, Y64, rcond=None)[0]
        solver = "lstsq"
    return np.ascontiguousarray(Wt.T), {"solver": solver, "condition_number": condition if condition < 1e300 else None}


def mean_cosine(A: np.ndarray, B: np.ndarray) -> float:
    """Mean row-wise cosine of two equally shaped matrices (zero rows count as cosine 0)."""
    import numpy as np

    A64, B64 = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    dots = np.einsum("ij,ij->i", A64, B64)
    norms = np.sqrt(np.einsum("ij,ij->i", A64, A64) * np.einsum("ij,ij->i", B64, B64))
    return float(np.mean(np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)))


def gaussian_rows(mean: np.ndarray, cov: np.ndarray, n: int, seed: int) -> Iterator[np.ndarray]:
    """``n`` float32 draws from N(mean, cov) in chunks; the same seed gives the same rows."""
    import numpy as np

    eigenvalues, eigenvectors = np.linalg.eigh(cov)
    # A symmetric square root tolerates the rank-deficient covariances of
    # small vocabularies, where a Cholesky factor would fail.
    factor = eigenvectors * np.sqrt(np.clip(eigenvalues, 0.0, None))
    rng = np.random.default_rng(seed)
    for start in range(0, n, _SAMPLE_CHUNK):
        z = rng.standard_normal((min(_SAMPLE_CHUNK, n - start), len(mean)))
        yield (mean + z @ factor.T).astype(np.float32)


def frequent_new_words(general: GeneralTokenizer, words: Sequence[str], counts: Mapping[str, int]) -> list[str]:
    """The most frequent new words that look like domain words (alphabetic, at least 6 letters)."""
    candidates = [w for w in words if len(w) >= MIN_TABLE_WORD_LEN and w.isalpha() and not general.is_known(w)]
    if counts:
        candidates.sort(key=lambda w: (-counts.get(w, 0), w))
    return candidates[:N_FREQUENT]


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
        norms = np.sqrt(np.einsum("ij,ij->i", vectors, vectors))
        sims = (vectors @ queries.T) / (np.maximum(norms[:, None], 1e-12) * np.maximum(norms[[index[w] for w in present]], 1e-12))
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
