"""The protocol every initialisation method follows, and what it is given."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol


from greenadapt.progress import NULL_PROGRESS, Progress

if TYPE_CHECKING:
    import numpy as np

    from greenadapt.adaptation.domain_tokenizer import GeneralTokenizer
    from greenadapt.adaptation.vectors import VectorRows

ROW_CHUNK = 32768


def options_for(method: InitMethod, settings: Any) -> dict[str, Any]:
    """Only the options that change ``method``'s rows (its own, and --match-norm), so other options never redo its stages."""
    return {name: getattr(settings, name) for name in sorted((*method.options, "match_norm"))}


@dataclass
class FitContext:
    """What ``align`` gives a method: the shared words' word2vec vectors X and embedding rows Y, and a folder."""

    X: np.ndarray  # (n_shared, d_w2v) float32; empty columns when no vectors were trained
    Y: np.ndarray  # (n_shared, d_model) float32
    train: np.ndarray  # indices of X/Y rows to fit on
    held: np.ndarray  # indices held out for the reported cosine
    seed: int
    options: Any  # the command's MethodSettings (align's, adapt's), as it is: the fields the method's `options` names
    dest: Path
    embeddings: np.ndarray  # the whole input-embedding matrix (V, d_model)


@dataclass(frozen=True)
class CorpusAccess:
    """What a method that reads the corpus (``reads_corpus``) is given besides the vectors."""

    model_path: Path  # the base model
    corpus_file: Callable[[], Path]  # the pre-tokenized corpus w2v read (made again if its cache is gone)
    checkpoint_dir: Path  # where a long fit saves its progress, beside the output


@dataclass
class RowContext:
    """What ``expand`` gives a method to make the new rows."""

    align_dir: Path
    words: Sequence[str]  # the new words, in id order
    vectors: VectorRows | None  # their word2vec vectors, in words order (None for methods that need none)
    embeddings: np.ndarray  # the input-embedding matrix (V, d_model), float32
    general: GeneralTokenizer
    shared_vectors: np.ndarray | None  # word2vec vectors of the shared words (methods that need them)
    shared_ids: np.ndarray | None  # their vocabulary ids, aligned with shared_vectors
    seed: int
    options: Any  # the command's MethodSettings (align's, adapt's, or read back from align's record), as it is
    match_norm_target: float | None = None  # set by expand under --match-norm, for the manifest
    corpus_access: CorpusAccess | None = None  # for a method that reads the corpus (``reads_corpus``)
    progress: Progress = NULL_PROGRESS
    method_stats: dict[str, Any] = field(default_factory=dict)  # the method's own figures, for the manifest


class InitMethod(Protocol):
    name: str
    summary: str  # one line for --help and the report
    needs_vectors: bool  # word vectors must be made (False: adapt only counts the corpus words)
    vector_source: str  # which vectors: "word2vec", "context" (the base model's own; context-mean) or "none"
    needs_shared_vectors: bool  # expand must read the shared words' vectors too
    vectors_are_rows: bool  # the vectors become rows as they are: word2vec's --dim must be the model's hidden size
    options: tuple[str, ...]  # the MethodSettings fields it uses
    seeded: bool  # it draws random numbers, so its output depends on --seed
    reads_corpus: bool  # expand gives it the base model and the corpus, and computes its rows before writing

    def owns_checkpoint(self, folder: Path) -> bool:
        """Whether ``folder`` (beside expand's output) holds this method's checkpoint, which expand may then replace or remove."""
        ...

    def fit(self, ctx: FitContext) -> dict[str, Any]:
        """Learn what the rows need from the shared words; write it to ``ctx.dest``; return report fields
        (``train_cosine``, ``heldout_cosine``: how well the method predicts held-out shared words' rows)."""
        ...

    def rows(self, ctx: RowContext) -> Iterator[np.ndarray]:
        """The new rows, float32 (n, d_model), in chunks of at most ROW_CHUNK, in ``ctx.words`` order."""
        ...


class MethodDefaults:
    """What most methods are: a method subclasses this and states only where it differs."""

    needs_vectors = True
    vector_source = "word2vec"
    needs_shared_vectors = False
    vectors_are_rows = False
    options: tuple[str, ...] = ()
    seeded = False
    reads_corpus = False

    def owns_checkpoint(self, folder: Path) -> bool:
        return False


def recorded_seed(method: InitMethod, seed: int) -> int | None:
    """The seed a stage records and fingerprints: None for a method that draws no random numbers, so that a
    seed change does not redo its output nor make a later stage refuse it as "made with other options"."""
    return seed if method.seeded else None


def describe(method: InitMethod, options: Any) -> dict[str, Any]:
    """How the manifest and the report name a method."""
    return {
        "name": method.name,
        "summary": method.summary,
        "options": options_for(method, options),
        "word2vec_trained": method.vector_source == "word2vec",
        "vector_source": method.vector_source,
    }
