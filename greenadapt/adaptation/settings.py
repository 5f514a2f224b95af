"""The options of ``w2v``, ``align``, ``expand`` and ``adapt``, each declared once (:mod:`greenadapt.options`).

Options several commands share are declared in one mixin each (the word2vec knobs, the initialisation
method's, context-mean's); a command's settings class lists the mixins it takes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from greenadapt.artifacts import kinds
from greenadapt.adaptation.methods import DEFAULT_METHOD, METHODS, method_help
from greenadapt.defaults import DEFAULT_MIN_COUNT_NEW, DEFAULT_SEED, check_seed
from greenadapt.errors import UsageError
from greenadapt.redaction import public_specs
from greenadapt.options import ADAPTATION, INPUT_OUTPUT, MODEL, PERFORMANCE, REQUIRED, TRAINING, Settings, model_paths, option, option_as_in

def check_focus_temperature(value: float) -> float:
    """focus's temperature: similarities are divided by it."""
    if not value > 0:
        raise UsageError(f"--focus-temperature must be positive, got {value}")
    return value


# gensim counts the words of all epochs in a C long and its workers die past it; no corpus needs more passes.
MAX_W2V_EPOCHS = 10_000
MAX_W2V_DRAWS = 16


def take_deprecated(settings: Settings, alias: str, field: str, meaning: str) -> None:
    """An option's old spelling (``alias``, a field not recorded) given: its value moves to ``field``, with one warning
    naming both spellings and what the option means in this command; both given with different values is refused."""
    import logging

    from greenadapt.options import declared_fields

    value = getattr(settings, alias)
    if value is None:
        return
    declared = {f.name: (f, d) for f, d in declared_fields(settings)}
    old, new = declared[alias][1].flags[0], declared[field][1].flags[0]
    if getattr(settings, field) not in (declared[field][0].default, value):
        raise UsageError(f"{old} and {new} were both given: {old} is the old spelling of {new}", hint=f"give {new} alone")
    logging.getLogger(__name__).warning("%s is deprecated: it is %s here (%s)", old, new, meaning)
    object.__setattr__(settings, field, value)
    object.__setattr__(settings, alias, None)


@dataclass(frozen=True, kw_only=True)
class ContextSettings(Settings):
    """context-mean's vectors (``w2v --source context``, ``adapt --method context-mean``)."""

    context_layer: int = option(-1, "--context-layer", panel=ADAPTATION,
                                help="context-mean: hidden layer of the base model (0 = embeddings, -1 = the last).")
    context_cap: int = option(20, "--context-cap", panel=ADAPTATION, minimum=1, help="context-mean: occurrences averaged per word at most.")
    context_max_tokens: int | None = option(None, "--context-max-tokens", panel=ADAPTATION, minimum=1,
                                            help="context-mean: read at most N corpus tokens "
                                                 "(default: until every word has --context-cap).")


@dataclass(frozen=True, kw_only=True)
class MethodSettings(Settings):
    """The initialisation method and its options (``align``, ``adapt``); names and help from the method registry."""

    method: str = option(DEFAULT_METHOD, "--method", panel=ADAPTATION, metavar="NAME", choices=tuple(METHODS), help=method_help())
    focus_k: int = option(10, "--focus-k", panel=ADAPTATION, minimum=1, help="focus: how many nearest shared words weigh into a row.")
    focus_temperature: float = option(0.1, "--focus-temperature", panel=ADAPTATION, check=check_focus_temperature,
                                      help="focus: similarities are divided by this before sparsemax (smaller: sparser).")
    hybrid_weight: float = option(0.5, "--hybrid-weight", panel=ADAPTATION, minimum=0, maximum=1,
                                  help="hybrid: the weight of lstsq (the rest is subword-mean).")
    match_norm: bool = option(False, "--match-norm", panel=ADAPTATION,
                              help="Rescale each new row to the mean norm of the model's whole-word rows (any method).")
    distill_per_word: int = option(4, "--distill-per-word", panel=ADAPTATION, minimum=1,
                                   help="distill: corpus windows per new word at most.")
    distill_sentences: int = option(16_000, "--distill-sentences", panel=ADAPTATION, minimum=1,
                                    help="distill: corpus windows in all at most (the CPU cost grows with it).")
    distill_epochs: int = option(1, "--distill-epochs", panel=ADAPTATION, minimum=1, help="distill: passes over the windows.")


@dataclass(frozen=True, kw_only=True)
class Word2vecSettings(Settings):
    """The corpus and the word2vec knobs (``w2v``, ``adapt``)."""

    positional = ("corpus",)

    corpus: tuple[str, ...] = option(REQUIRED, "--corpus", "-c", panel=INPUT_OUTPUT, public=public_specs,
                                     help="Registered corpus name, file, folder, glob or URL (.txt, .gz, .bz2, .xz, JSON lines, CSV). "
                                          "Repeatable.")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Model folder or Hub id whose tokenizer defines the words (default: the bundled MiniLM).")
    text_fields: tuple[str, ...] | None = option(None, "--text-field", panel=INPUT_OUTPUT,
                                                 help="Field(s) holding the text in JSON lines/CSV sources (default: text). Repeatable.")
    dim: int | None = option(None, "--dim", panel=ADAPTATION, minimum=1, help="word2vec vector size (default: the model's hidden size).")
    epochs: int = option(5, "--epochs", panel=TRAINING, minimum=1, maximum=MAX_W2V_EPOCHS, help="word2vec passes over the corpus.")
    min_count: int = option(5, "--w2v-min-count", panel=ADAPTATION, minimum=1,
                            help="word2vec ignores words seen fewer times (the new-word threshold is --min-count-new).")
    min_count_spelled: int | None = option(None, "--min-count", panel=ADAPTATION, minimum=1, recorded=False,
                                           help="Deprecated: the old spelling of --w2v-min-count.")
    max_vocab: int | None = option(
        None, "--max-vocab", panel=ADAPTATION, metavar="N", minimum=1,
        help="Keep at most N words, the most frequent (gensim's max_final_vocab: min-count is raised as needed); bounds a huge corpus's "
             "vocabulary.")
    workers: int | None = option(
        None, "--workers", panel=PERFORMANCE, minimum=1,
        help="Processes/threads (default: the cores this process may use: affinity mask and cgroup quota, or $GREENADAPT_WORKERS); with 1, "
             "runs are reproducible.")
    seed: int = option(DEFAULT_SEED, "--seed", panel=TRAINING, check=check_seed, help="Random seed (adapt: of every stage).")

    def __post_init__(self) -> None:
        super().__post_init__()
        take_deprecated(self, "min_count_spelled", "min_count", "word2vec's threshold; the new-word threshold is --min-count-new")


@dataclass(frozen=True, kw_only=True)
class W2vSettings(Word2vecSettings, ContextSettings):
    """``greenadapt w2v``: CBOW word2vec on a corpus in the model's own words (or context-mean's vectors)."""

    command = "w2v"
    run_help = {"out": "Output folder (default: WORKDIR/CORPUS/MODEL/w2v)."}

    source: str = option("word2vec", "--source", panel=INPUT_OUTPUT, metavar="NAME", choices=("word2vec", "context"),
                         help="word2vec (CBOW, the paper) or context (the base model's own contextual vectors, for align --method "
                              "context-mean).")
    no_vectors: bool = option(False, "--no-vectors", panel=ADAPTATION,
                              help="Only count the corpus words (--min-count applies); train no vectors (for align --method subword-mean "
                                   "or random).")

    def check(self) -> None:
        if self.source == "context" and self.no_vectors:
            raise UsageError("--no-vectors counts words and makes no vectors, so --source context has nothing to do",
                             hint="drop one of them: --source context makes the model's own vectors")



@dataclass(frozen=True, kw_only=True)
class AlignSettings(MethodSettings):
    """``greenadapt align``: fit the initialisation method on the words word2vec and the model share."""

    command = "align"
    run_help = {"out": "Output folder (default: beside the w2v folder)."}

    w2v: Path | None = option(None, "--w2v", panel=INPUT_OUTPUT, help="Folder written by `greenadapt w2v`.")
    corpus: tuple[str, ...] | None = option(None, "--corpus", "-c", panel=INPUT_OUTPUT, public=public_specs,
                                            help="Find the w2v output of this corpus in the workspace (repeatable).")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Model folder or Hub id (default: the model the w2v output was made with).")
    seed: int = option_as_in(Word2vecSettings, "seed", DEFAULT_SEED, help="Seed of the held-out split (and of the random ablation).")
    probe: tuple[str, ...] = option((), "--probe", panel=ADAPTATION, help="Also show the neighbours of this word (repeatable).")



@dataclass(frozen=True, kw_only=True)
class NewRowsSettings(Settings):
    """Which new words get rows, as expand writes them (``expand``, and ``adapt``, which passes the group on as it is)."""

    max_new: int | None = option(None, "--max-new", panel=ADAPTATION, minimum=0, fingerprint="always",
                                 help="Add at most this many new words, most frequent first.")


@dataclass(frozen=True, kw_only=True)
class ExpandSettings(NewRowsSettings):
    """``greenadapt expand``: the aligned rows of new words, and a domain tokenizer that keeps them whole."""

    command = "expand"
    run_help = {"out": "Output model folder (default: beside the align folder)."}

    align: Path | None = option(None, "--align", panel=INPUT_OUTPUT, help="Folder written by `greenadapt align`.")
    corpus: tuple[str, ...] | None = option(None, "--corpus", "-c", panel=INPUT_OUTPUT, public=public_specs,
                                            help="Find the align output of this corpus in the workspace (repeatable).")
    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Model folder or Hub id (default: the model align was fitted on).")
    min_count: int = option(DEFAULT_MIN_COUNT_NEW, "--min-count-new", panel=ADAPTATION, minimum=1,
                            help="Add only words the corpus has at least this often (1: every word2vec word, the paper's setting).")
    min_count_spelled: int | None = option(None, "--min-count", panel=ADAPTATION, minimum=1, recorded=False,
                                           help="Deprecated: the old spelling of --min-count-new.")
    seed: int = option_as_in(Word2vecSettings, "seed", DEFAULT_SEED, help="Seed of the random ablation's draws (align --method random).")
    method: str | None = option(None, "--method", panel=ADAPTATION, metavar="NAME", choices=tuple(METHODS),
                                help="The initialisation method (chosen at align): with --corpus, use its align folder; with --align, "
                                     "check it. "
                                     + method_help())
    also_align: tuple[Path, ...] = option((), "--also-align", panel=ADAPTATION, metavar="DIR",
                                          help="The align folder of another word2vec draw (repeat): each new row is the mean of the draws' "
                                               "rows.")

    def __post_init__(self) -> None:
        super().__post_init__()
        take_deprecated(self, "min_count_spelled", "min_count", "the new-word threshold, as in adapt")


@dataclass(frozen=True, kw_only=True)
class SecondViewSettings(Settings):
    """``greenadapt second-view``: the model with a second tokenizer over its own vocabulary (no corpus, no new rows)."""

    command = "second-view"
    run_help = {"out": "Output model folder (default: <workdir>/second-view/<model>/drop-<p>-seed-<s>)."}

    model: str | None = option(None, "--model", "-m", public=model_paths, panel=MODEL,
                               help="Model folder or Hub id (default: the bundled MiniLM).")
    drop: float = option(0.1, "--drop", panel=ADAPTATION, minimum=0.01, maximum=0.9,
                         help="Fraction of the vocabulary's pieces of two characters or more that the second tokenizer never uses "
                              "(words with one are cut otherwise: a fixed alternative segmentation).")
    seed: int = option_as_in(Word2vecSettings, "seed", DEFAULT_SEED, help="Seed of the draw of dropped pieces.")


@dataclass(frozen=True, kw_only=True)
class AdaptSettings(Word2vecSettings, MethodSettings, ContextSettings, NewRowsSettings):
    """``greenadapt adapt``: w2v, align and expand in one command."""

    command = "adapt"
    run_help = {"out": "Folder for the adapted model (default: in the workspace)."}
    stage_names = {kinds.EXPAND: {"min_count": "min_count_new"}}  # expand's --min-count; w2v's is adapt's --min-count

    min_count_new: int = option(DEFAULT_MIN_COUNT_NEW, "--min-count-new", panel=ADAPTATION, minimum=1,
                                help="Add only words the corpus has at least this often (1: every word2vec word, the paper's setting).")
    w2v_draws: int = option(1, "--w2v-draws", panel=ADAPTATION, metavar="K", minimum=1, maximum=MAX_W2V_DRAWS,
                            help="Train word2vec K times (seeds --seed, --seed+1, ...) and average each new word's aligned rows: "
                                 "a gain that depends less on one draw's luck (K times the word2vec cost).")

    def check(self) -> None:
        from greenadapt.adaptation.methods import get_method

        if self.w2v_draws > 1 and get_method(self.method).vector_source != "word2vec":
            raise UsageError(f"--method {self.method} uses no word2vec vectors, so there are no draws to average",
                             hint="--w2v-draws is for lstsq, focus, hybrid and identity")
        check_seed(self.seed + self.w2v_draws - 1, option="--seed")
