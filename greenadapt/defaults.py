"""Defaults shared by every command and its Python function, so the CLI and the API cannot disagree."""

from __future__ import annotations

# One seed for every stage: `w2v`, `align`, `expand` and `adapt` (and the training commands)
# then name the same outputs, so `w2v --corpus X` followed by `adapt --corpus X` reuses w2v.
DEFAULT_SEED = 42

# A corpus word becomes a new token only if the corpus has it at least this often (`expand --min-count`,
# `adapt --min-count-new`). Rare words get the noisiest word2vec vectors: in the CPU study (docs/study.md,
# issue 38) 20 matched the paper's setting (1, every word2vec word) on NCBI-disease and BC5CDR-disease with a
# third of the new rows, and cleared +0.5 F1 over the base model on both. `--min-count-new 1` is the paper's setting.
DEFAULT_MIN_COUNT_NEW = 20

# Wordpieces per training sequence, [CLS] and [SEP] included, for every task that does not derive it from the model.
DEFAULT_MAX_LENGTH = 128

# The shortest --max-length any command takes: [CLS], [SEP] and room for a few words (and a QA question).
MIN_MAX_LENGTH = 8


def check_max_length(value: int) -> int:
    """``value`` (``--max-length``), or the one refusal every command gives for a length below :data:`MIN_MAX_LENGTH`."""
    from greenadapt.errors import UsageError

    if value < MIN_MAX_LENGTH:
        raise UsageError(f"--max-length {value} is too short", hint=f"use at least {MIN_MAX_LENGTH} (BERT models take up to 512)")
    return value


# --train-embeddings: which word-embedding rows train (every row, the rows expand added, none).
TRAIN_EMBEDDINGS = ("all", "new", "none")

# Bounds of a training command's length: far past any real run (a fine-tuning is 2-10 epochs, a pretraining
# thousands to a million steps), low enough that a typo (--epochs 1e18) is refused instead of trained for ever.
MAX_EPOCHS = 10_000
MAX_STEPS = 1_000_000_000

# The largest seed every random generator greenadapt seeds accepts (numpy's: 32 bits).
MAX_SEED = 2**32 - 1
# Bounds of options that no recipe comes near, so that a typo or a 400-digit number is refused in one line before any
# arithmetic turns it into an overflow: the agreement's weight (W x the KL: 1 is the studied value), label smoothing
# (1 puts every label at the same target: nothing left to learn), an inference batch.
MAX_AGREEMENT = 100.0
MAX_LABEL_SMOOTHING = 0.99
MAX_BATCH = 65_536
MAX_THREADS = 4_096  # --threads: more than any machine's cores; a typo of 10^6 would start a million threads
# Any integer option without a bound of its own: beyond it, a value cannot be a count the machine holds.
MAX_OPTION_INT = 2**53


def check_seed(value: int, *, option: str = "--seed") -> int:
    """``value``, or the one refusal every command gives for a seed numpy, torch and gensim cannot all take."""
    from greenadapt.errors import UsageError

    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SEED:
        raise UsageError(f"{option} {value} is out of range", hint=f"a seed is a whole number from 0 to {MAX_SEED}")
    return value
