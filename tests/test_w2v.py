"""The w2v stage: gensim-equivalent vectors in the model's words, skip/force, determinism, CLI."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import HANG_S, heavy_modules_after

import greenadapt
from greenadapt import errors
from greenadapt.adaptation.w2v import COUNTS_FILE, VECTORS_FILE, _training_progress, stable_hash
from greenadapt.artifacts.manifest import load_stage
from greenadapt.errors import CorpusError, OutputExistsError, UsageError

REPO = Path(__file__).resolve().parent.parent
WORDS = (
    "the of and in to a with Patients Cells tumor Blood heart-rate sleep café naïve Tachycardia "
    "infection virus COVID-19 protein gene expression β-blocker"
).split()


def _corpus(path: Path, lines: int = 1500, seed: int = 0) -> Path:
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(lines):
            handle.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 25))) + ".\n")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _corpus(tmp_path_factory.mktemp("w2v-corpus") / "domain.txt")


class Recorder:
    """A Progress that remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start(self, description: str, total: float | None = None, unit: str = "") -> None:
        self.calls.append(("start", description, total, unit))

    def update(self, completed: float, **info: float | str) -> None:
        self.calls.append(("update", completed, info))

    def finish(self) -> None:
        self.calls.append(("finish",))


def _run(corpus: Path, model: Path, work: Path, *, options: dict[str, Any] | None = None, **run: Any) -> Any:
    """The w2v command in the workspace ``work``; ``options`` its options (default: one worker, min-count 2); ``run``:
    out, force, progress."""
    return greenadapt.w2v([str(corpus)], model=str(model), **(options or {"workers": 1, "min_count": 2}), workdir=work, **run)


def test_outputs_and_manifest(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    from gensim.models import KeyedVectors

    progress = Recorder()
    outcome = _run(corpus, tiny_bert, tmp_path / "work", progress=progress)
    assert not outcome.skipped
    assert outcome.path == (tmp_path / "work" / outcome.path.relative_to(tmp_path / "work")).absolute()
    assert outcome.path.parts[-1] == "w2v" and outcome.path.parts[-2] == "model"
    manifest = json.loads((outcome.path / "manifest.json").read_text())
    assert manifest["kind"] == "w2v"
    config = manifest["config"]
    assert config["dim"] == 32  # the tiny model's hidden size
    assert config["lowercase"] is True and config["strip_accents"] is True
    assert config["workers"] == 1 and config["min_count"] == 2 and config["epochs"] == 5
    assert config["model"]["files_digest"]
    assert manifest["inputs"][0]["path"] == str(corpus.resolve())
    # The libraries it used: the model's tokenizer is read with tokenizers; torch and transformers never load.
    assert set(manifest["libraries"]) == {"python", "greenadapt", "gensim", "numpy", "tokenizers"}

    vectors = KeyedVectors.load_word2vec_format(str(outcome.path / VECTORS_FILE), binary=True)
    counts = [line.split("\t") for line in (outcome.path / COUNTS_FILE).read_text(encoding="utf-8").splitlines()]
    assert [w for w, _ in counts] == vectors.index_to_key
    numbers = [int(c) for _, c in counts]
    assert numbers == sorted(numbers, reverse=True) and min(numbers) >= 2
    # the words are the uncased model's words: lower-cased, accents stripped, punctuation split off
    assert {"cafe", "naive", "tachycardia", "covid", "-", "19", "β", "blocker", "."} <= set(vectors.index_to_key)
    assert not {"café", "Patients", "heart-rate", "COVID-19"} & set(vectors.index_to_key)
    assert vectors.vector_size == 32

    stats = manifest["stats"]
    pretok_counts = _pretok_counts(Path(stats["pretok_cache"]))
    assert stats["tokens"] == sum(pretok_counts.values())
    assert stats["vocab_size"] == len(vectors) == sum(1 for c in pretok_counts.values() if c >= 2)
    assert dict(zip(vectors.index_to_key, numbers)) == {w: c for w, c in pretok_counts.items() if c >= 2}
    assert stats["raw_words"] == 5 * stats["tokens"] and 0 < stats["words_trained"] <= stats["raw_words"]
    assert stats["pretok_cached"] is False and stats["words_per_s"] > 0

    phases = [call[1] for call in progress.calls if call[0] == "start"]
    assert phases == ["pre-tokenizing", "word2vec"]
    last = [call for call in progress.calls if call[0] == "update"][-1]
    assert last[1] == 5 * stats["tokens"] and last[2]["words_per_s"] > 0


def _pretok_counts(folder: Path) -> dict[str, int]:
    rows = (folder / "vocab.tsv").read_text(encoding="utf-8").splitlines()
    return {word: int(count) for word, _, count in (row.rpartition("\t") for row in rows)}


def test_vectors_equal_plain_gensim_on_the_same_text(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    import numpy as np
    from gensim.models import KeyedVectors, Word2Vec

    outcome = _run(corpus, tiny_bert, tmp_path / "work", options=dict(workers=1, min_count=2, seed=7))
    ours = KeyedVectors.load_word2vec_format(str(outcome.path / VECTORS_FILE), binary=True)
    pretokenized = Path(outcome.manifest["stats"]["pretok_cache"]) / "corpus.txt"
    plain = Word2Vec(
        corpus_file=str(pretokenized), vector_size=32, min_count=2, workers=1, seed=7, sg=0, hs=0, hashfxn=stable_hash
    )
    assert ours.index_to_key == plain.wv.index_to_key
    assert np.array_equal(ours.vectors, plain.wv.vectors)


def test_rerun_skips_without_reading_the_corpus_and_force_redoes(
    tmp_path: Path, corpus: Path, tiny_bert: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import greenadapt.adaptation.w2v as w2v_module

    first = _run(corpus, tiny_bert, tmp_path / "work")
    real = w2v_module.pretokenize_corpus

    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the corpus was read on an up-to-date rerun")

    monkeypatch.setattr(w2v_module, "pretokenize_corpus", must_not_run)
    second = _run(corpus, tiny_bert, tmp_path / "work")
    assert second.skipped and "up to date" in second.skip_reason
    assert second.manifest["fingerprint"] == first.manifest["fingerprint"]

    monkeypatch.setattr(w2v_module, "pretokenize_corpus", real)
    other = dict(workers=1, min_count=2, epochs=2)
    # Another configuration goes beside the first, named by what it changes; the first is untouched.
    beside = _run(corpus, tiny_bert, tmp_path / "work", options=other)
    assert beside.path.parent == first.path.parent and not beside.skipped
    assert beside.path.name.startswith("w2v+") and "epochs-2" in beside.path.name  # (+ workers-1 where the default differs)
    assert load_stage(first.path, "w2v")["fingerprint"] == first.manifest["fingerprint"]
    assert _run(corpus, tiny_bert, tmp_path / "work", options=other).skipped  # the same options find it again
    with pytest.raises(OutputExistsError, match="epochs"):  # an explicit --out holding other options is still refused
        _run(corpus, tiny_bert, tmp_path / "work", options=other, out=first.path)
    third = _run(corpus, tiny_bert, tmp_path / "work", options=other, force=True)
    assert third.path == first.path and not third.skipped and third.manifest["config"]["epochs"] == 2
    assert third.manifest["stats"]["raw_words"] == 2 * third.manifest["stats"]["tokens"]


def test_pretokenized_cache_is_shared_between_options(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    a = _run(corpus, tiny_bert, tmp_path / "work", out=tmp_path / "a")
    b = _run(corpus, tiny_bert, tmp_path / "work", out=tmp_path / "b", options=dict(workers=1, dim=8))
    assert a.manifest["stats"]["pretok_cached"] is False and b.manifest["stats"]["pretok_cached"] is True
    assert a.manifest["stats"]["pretok_cache"] == b.manifest["stats"]["pretok_cache"]
    assert b.manifest["config"]["dim"] == 8 and b.manifest["config"]["min_count"] == 5


def test_bad_options_and_inputs(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    with pytest.raises(UsageError, match="^epochs must be at least 1"):
        _run(corpus, tiny_bert, tmp_path / "work", options=dict(epochs=0))
    with pytest.raises(CorpusError, match="no word occurs at least 100000 times"):
        _run(corpus, tiny_bert, tmp_path / "work", options=dict(workers=1, min_count=100_000))
    assert not (tmp_path / "work" / "domain-").exists()


def _long_lines(path: Path, *, zipf: bool, lines: int = 3, words: int = 30_000, types: int = 3000) -> Path:
    """Documents without sentence breaks: each line is ``words`` words long."""
    rng = random.Random(1)
    vocabulary = [f"term{i}" for i in range(types)]
    weights = [1 / (rank + 1) for rank in range(types)] if zipf else None
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(lines):
            handle.write(" ".join(rng.choices(vocabulary, weights, k=words)) + "\n")
    return path


def test_long_documents_lose_no_words_in_gensim(tmp_path: Path, tiny_bert: Path) -> None:
    # Natural (Zipfian) text: frequent words are sub-sampled, so after the
    # cut at 1,000 words no gensim batch reaches its 10,000-word limit.
    corpus = _long_lines(tmp_path / "docs.txt", zipf=True)
    options = dict(workers=1, min_count=1, dim=8, epochs=2)
    outcome = _run(corpus, tiny_bert, tmp_path / "w", options=options)
    stats = outcome.manifest["stats"]
    assert stats["tokens"] == 90_000 and stats["lines"] == 90  # 3 lines of 30,000 words, cut
    assert stats["raw_words"] == 2 * stats["tokens"]
    assert stats["words_dropped_estimate"] < 0.02
    assert abs(stats["words_trained"] - stats["words_expected"]) < 0.02 * stats["words_expected"]


def test_gensim_batch_losses_are_reported_not_silent(
    tmp_path: Path, tiny_bert: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Almost nothing sub-sampled (3,000 equally rare words): gensim's batches
    # overflow its 10,000-word limit and it skips their ends.
    corpus = _long_lines(tmp_path / "flat.txt", zipf=False)
    with caplog.at_level(logging.WARNING, logger="greenadapt"):
        outcome = _run(corpus, tiny_bert, tmp_path / "w", options=dict(workers=1, min_count=1, dim=8, epochs=1))
    dropped = outcome.manifest["stats"]["words_dropped_estimate"]
    assert 0.02 < dropped < 0.1  # at most one 1,000-word line per ~11,000-word batch
    assert any("fewer words than sub-sampling predicts" in r.getMessage() for r in caplog.records)


_DETERMINISM_SCRIPT = textwrap.dedent(
    """
    import hashlib, sys
    from pathlib import Path
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers
    from greenadapt.corpus.pretokenize import pretokenize_corpus
    from greenadapt.corpus import resolve_corpus
    from greenadapt.progress import NULL_PROGRESS
    from greenadapt.adaptation.settings import W2vSettings
    from greenadapt.adaptation.w2v import _train

    corpus, work = Path(sys.argv[1]), Path(sys.argv[2])
    tokenizer = Tokenizer(models.WordPiece({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    pretok = pretokenize_corpus(resolve_corpus([str(corpus)]), tokenizer, work / "cache", workers=1)
    settings = W2vSettings(corpus=("corpus.txt",), min_count=2, seed=3)
    vectors, _ = _train(pretok, dim=24, settings=settings, workers=1, progress=NULL_PROGRESS)
    vectors.save_word2vec_format(str(work / "vectors.bin"), binary=True)
    print(hashlib.sha256((work / "vectors.bin").read_bytes()).hexdigest())
    """
)


def test_one_worker_is_deterministic_across_processes(tmp_path: Path, corpus: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(_DETERMINISM_SCRIPT)
    digests = []
    for hash_seed in ("1", "2"):
        work = tmp_path / f"run{hash_seed}"
        work.mkdir()
        result = subprocess.run(
            [sys.executable, str(script), str(corpus), str(work)],
            capture_output=True,
            text=True,
            timeout=HANG_S,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            cwd=REPO,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        digests.append(result.stdout.strip().splitlines()[-1])
    assert digests[0] == digests[1] and len(digests[0]) == 64
    assert stable_hash("tachycardia") == int.from_bytes(
        hashlib.blake2b(b"tachycardia", digest_size=8).digest(), "little"
    )


def test_gensim_progress_log_feeds_the_bar_and_stays_quiet(caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Positions come from gensim's log; the rate is tokens over time, not gensim's words/s (which counts the
    words left after subsampling: the ETA of issue 57, point 6, was 4 times too long)."""
    from greenadapt.adaptation import w2v

    clock = iter([100.0, 110.0, 120.0, 125.0])  # started; then one reading per update
    monkeypatch.setattr(w2v.time, "perf_counter", lambda: next(clock))
    logger = logging.getLogger("gensim.models.word2vec")
    previous = logger.level
    logger.setLevel(logging.WARNING)
    progress = Recorder()
    try:
        with caplog.at_level(logging.DEBUG, logger="greenadapt"), _training_progress(progress, 1000, 4) as callbacks:
            assert len(callbacks) == 1
            logger.info(
                "EPOCH %i - PROGRESS: at %.2f%% examples, %.0f words/s, in_qsize %i, out_qsize %i", 0, 50.0, 1234.0, -1, 0
            )
            callbacks[0].on_epoch_end(None)
            logger.info(
                "EPOCH %i - PROGRESS: at %.2f%% examples, %.0f words/s, in_qsize %i, out_qsize %i", 1, 25.0, 999.0, -1, 0
            )
            logger.warning("a real warning")
        assert logger.level == logging.WARNING
    finally:
        logger.setLevel(previous)
    assert progress.calls[0] == ("start", "word2vec", 4000, "words")
    updates = [call[1:] for call in progress.calls if call[0] == "update"]
    assert updates[0] == (500.0, {"words_per_s": 500.0 / 10})  # 500 tokens in 10 s, whatever gensim says (1234)
    assert updates[1] == (1000, {"words_per_s": 1000 / 20})
    assert updates[2] == (1250.0, {"words_per_s": 1250.0 / 25})
    assert progress.calls[-1] == ("finish",)
    shown = [r.getMessage() for r in caplog.records if r.name == "gensim.models.word2vec"]
    assert shown == ["a real warning"]


# --------------------------------------------------------------------------
# The command


@pytest.fixture
def cli() -> Any:
    from typer.testing import CliRunner

    from greenadapt.cli import _register, app

    _register()
    runner = CliRunner()
    yield lambda *args: runner.invoke(app, list(args), catch_exceptions=False)
    # the command points a log handler at the runner's (now closed) stderr
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_greenadapt", False):
            root.removeHandler(handler)


def test_command_summary_skip_force_and_json(tmp_path: Path, corpus: Path, tiny_bert: Path, cli: Any) -> None:
    args = ["w2v", "--corpus", str(corpus), "--model", str(tiny_bert), "--workdir", str(tmp_path / "w"), "--workers", "1"]
    first = cli(*args, "--w2v-min-count", "2", "-q")
    assert first.exit_code == 0, first.output
    line = first.stdout.strip()
    assert line.startswith("w2v: ") and " words x 32 dims from " in line and " tokens in " in line
    folder = Path(line.rsplit(" -> ", 1)[1])
    assert (folder / VECTORS_FILE).is_file()

    again = cli(*args, "--w2v-min-count", "2", "-q")
    assert again.exit_code == 0 and again.stdout.startswith("w2v: up to date (") and str(folder) in again.stdout

    forced = cli(*args, "--w2v-min-count", "2", "--force", "--json", "-q")
    assert forced.exit_code == 0
    manifest = json.loads(forced.stdout)
    assert manifest["kind"] == "w2v" and manifest["config"]["min_count"] == 2
    assert manifest["fingerprint"] == json.loads((folder / "manifest.json").read_text())["fingerprint"]

    out = cli(*args, "--dim", "8", "--epochs", "1", "--seed", "4", "--out", str(tmp_path / "elsewhere"), "-q")
    assert out.exit_code == 0 and out.stdout.strip().endswith(str((tmp_path / "elsewhere").absolute()))
    assert json.loads((tmp_path / "elsewhere" / "manifest.json").read_text())["config"]["dim"] == 8


def test_command_empty_corpus_is_one_line_and_exit_3(tmp_path: Path, tiny_bert: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n\t\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "greenadapt", "w2v", "--corpus", str(empty), "--model", str(tiny_bert),
         "--workdir", str(tmp_path / "w"), "-q"],
        capture_output=True,
        text=True,
        timeout=HANG_S,
        cwd=tmp_path,
    )
    assert result.returncode == errors.EXIT_BAD_INPUT == 3
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "empty.txt" in lines[0] and "no words" in lines[0]


@pytest.mark.integration
def test_minilm_on_cord19_abstracts(tmp_path: Path, minilm_path: Path, shared_data: Path) -> None:
    from gensim.models import KeyedVectors

    source = shared_data / "corpora" / "cord19-abstracts-sample.jsonl"
    outcome = greenadapt.w2v([str(source)], model=str(minilm_path), epochs=1, workers=2, text_fields=["abstract"], workdir=tmp_path / "w")
    manifest = outcome.manifest
    assert manifest["config"]["dim"] == 384 and manifest["config"]["lowercase"] is True
    assert manifest["config"]["text_fields"] == ["abstract"]
    vectors = KeyedVectors.load_word2vec_format(str(outcome.path / VECTORS_FILE), binary=True)
    assert len(vectors) == manifest["stats"]["vocab_size"] > 5_000
    assert vectors.index_to_key[0] in {"the", ",", "."}
    assert all(word == word.lower() for word in vectors.index_to_key)
    assert {"covid", "coronavirus", "sars", "patients"} <= set(vectors.index_to_key)


def test_max_vocab_keeps_the_most_frequent_words_as_gensim_does(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    import numpy as np
    from gensim.models import KeyedVectors, Word2Vec

    from greenadapt.adaptation.w2v import effective_min_count

    full = _run(corpus, tiny_bert, tmp_path / "work", options=dict(workers=1, min_count=1, seed=7))
    cap = full.manifest["stats"]["vocab_size"] // 3
    # Other options: a folder of their own beside, never a silent reuse or overwrite.
    beside = _run(corpus, tiny_bert, tmp_path / "work", options=dict(workers=1, min_count=1, seed=7, max_vocab=cap))
    assert beside.path != full.path and f"max-vocab-{cap}" in beside.path.name and beside.manifest["config"]["max_vocab"] == cap
    assert load_stage(full.path, "w2v")["fingerprint"] == full.manifest["fingerprint"]
    capped = _run(corpus, tiny_bert, tmp_path / "work", out=tmp_path / "capped",
                  options=dict(workers=1, min_count=1, seed=7, max_vocab=cap))
    assert capped.manifest["config"]["max_vocab"] == cap and "max_vocab" not in full.manifest["config"]
    ours = KeyedVectors.load_word2vec_format(str(capped.path / VECTORS_FILE), binary=True)
    assert 0 < len(ours) <= cap
    counts = _pretok_counts(Path(capped.manifest["stats"]["pretok_cache"]))
    floor = effective_min_count(counts, 1, cap)
    assert set(ours.index_to_key) == {w for w, c in counts.items() if c >= floor}  # the most frequent, ties dropped together
    assert min(counts[w] for w in ours.index_to_key) > max(c for w, c in counts.items() if w not in set(ours.index_to_key))

    # Identical to gensim's own max_final_vocab on the same text.
    pretokenized = Path(capped.manifest["stats"]["pretok_cache"]) / "corpus.txt"
    plain = Word2Vec(corpus_file=str(pretokenized), vector_size=32, min_count=1, max_final_vocab=cap, workers=1, seed=7, sg=0, hs=0,
                     hashfxn=stable_hash)
    assert ours.index_to_key == plain.wv.index_to_key and np.array_equal(ours.vectors, plain.wv.vectors)

    # The counts-only path (no vectors) applies the same rule.
    counted = _run(corpus, tiny_bert, tmp_path / "work", options=dict(workers=1, min_count=1, max_vocab=cap, no_vectors=True))
    rows = (counted.path / COUNTS_FILE).read_text(encoding="utf-8").splitlines()
    assert {row.split("\t")[0] for row in rows} == set(ours.index_to_key)


def test_gensim_is_imported_beside_pretokenization_only_when_word2vec_trains(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    """The import (about a second) starts before pre-tokenization and overlaps it; counting words alone never loads gensim."""
    script = (
        "import json, sys\n"
        "from greenadapt.adaptation import w2v\n"
        "import greenadapt\n"
        "events, beside, pretokenize = [], w2v._import_beside, w2v.pretokenize_corpus\n"
        "w2v._import_beside = lambda module: (events.append(module), beside(module))[1]\n"
        "w2v.pretokenize_corpus = lambda *a, **k: (events.append('pretokenize'), pretokenize(*a, **k))[1]\n"
        "for _ in range(int(sys.argv[5])):\n"
        "    greenadapt.w2v(sys.argv[2], model=sys.argv[3], workers=1, min_count=2, epochs=1, no_vectors=sys.argv[1] != 'vectors',\n"
        "                   workdir=sys.argv[4])\n"
        "print(json.dumps([events, 'gensim' in sys.modules]))\n"
    )
    for mode, expected in (("counts", [["pretokenize"], False]), ("vectors", [["gensim.models", "pretokenize"], True])):
        # Twice: the second run is up to date and skipped, and pays neither pre-tokenization nor the import.
        done = subprocess.run([sys.executable, "-c", script, mode, str(corpus), str(tiny_bert), str(tmp_path / mode), "2"],
                              capture_output=True, text=True, timeout=HANG_S)
        assert done.returncode == 0, done.stderr[-2000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == expected, mode


def test_effective_min_count_follows_gensim() -> None:
    from greenadapt.adaptation.w2v import effective_min_count

    counts = {"a": 9, "b": 7, "c": 7, "d": 3, "e": 1}
    assert effective_min_count(counts, 1, None) == 1
    assert effective_min_count(counts, 1, 10) == 1
    assert effective_min_count(counts, 1, 3) == 4  # the 4th word has 3: a, b, c stay
    assert effective_min_count(counts, 1, 2) == 8  # b and c tie at the cut: both go
    assert effective_min_count(counts, 5, 4) == 5  # never below min_count


def test_a_corpus_copied_back_with_a_new_time_is_not_trained_again(tmp_path: Path, corpus: Path, tiny_bert: Path, cli: Any) -> None:
    import shutil

    local = tmp_path / "corpus.txt"
    shutil.copyfile(corpus, local)
    args = ["w2v", "--corpus", str(local), "--model", str(tiny_bert), "--workdir", str(tmp_path / "w"), "--workers", "1",
            "--w2v-min-count", "2", "-q"]
    assert cli(*args).exit_code == 0
    shutil.copyfile(corpus, local)  # `cp` without -p: same bytes, a new modification time
    os.utime(local, ns=(local.stat().st_mtime_ns + 5 * 10**9,) * 2)
    again = cli(*args)
    assert again.exit_code == 0 and again.stdout.startswith("w2v: up to date (")
    with open(local, "a", encoding="utf-8") as more:
        more.write("one more line of text\n")
    from greenadapt.errors import OutputExistsError

    with pytest.raises(OutputExistsError, match=r"corpus.txt changed: \d+ bytes then, \d+ now") as refused:
        cli(*args)
    assert refused.value.exit_code == 4 and "--force" in str(refused.value.hint)


def test_w2v_and_align_start_without_torch_or_transformers(tmp_path: Path, corpus: Path, tiny_bert: Path) -> None:
    """The CPU stages read tokenizer.json with `tokenizers` and the embeddings with safetensors' numpy reader:
    torch and transformers (2-3 s to import, more than gensim) are never loaded, so a small w2v costs what gensim does."""
    common = ["--corpus", str(corpus), "--model", str(tiny_bert), "--workdir", str(tmp_path / "work"), "--quiet"]
    assert heavy_modules_after(["w2v", "--epochs", "1", *common], ["align", *common]) == []
    assert list((tmp_path / "work").glob("*/*/align/manifest.json")), "align did not run"


def test_the_benchmark_against_raw_gensim_runs_and_reports_its_ratio(tmp_path: Path, corpus: Path, tiny_bert: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """bench/bench_w2v.py, the stage's anchor in docs/benchmarks.md: both sides train on the same text, so they find the
    same vocabulary (it once crashed at its report, after both trainings, unnoticed until it was run again)."""
    from bench_helpers import BENCH, bench_module

    monkeypatch.syspath_prepend(str(BENCH))  # as `python bench/bench_w2v.py` runs: beside the other bench modules
    bench = bench_module("bench_w2v")
    monkeypatch.setattr(sys, "argv", ["bench_w2v.py", "--corpus", str(corpus), "--model", str(tiny_bert), "--out", str(tmp_path),
                                      "--dim", "16", "--epochs", "1", "--min-count", "2", "--workers", "1"])
    bench.main()
    result = json.loads((tmp_path / "bench_w2v.json").read_text())
    assert result["same_vocabulary"] and result["a_vocab_size"] == result["b_vocab_size"] > 20
    assert result["options"] == {"dim": 16, "epochs": 1, "min_count": 2, "workers": 1, "seed": 1}
    # the Markdown row docs/benchmarks.md quotes carries the JSON's figures (the goal, 1.15, is a constant of the bench)
    row = capsys.readouterr().out.strip().splitlines()[-1]
    assert result["ratio"] > 0 and f"| {result['ratio']:.3f} |" in row and f"{result['a_vocab_size']:,} / " in row
