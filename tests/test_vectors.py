"""word2vec binary I/O, counts, and reading the embedding matrix from checkpoints."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenadapt.adaptation.vectors import read_counts, read_word2vec_binary, write_counts, write_word2vec_binary
from greenadapt.artifacts.model_weights import read_input_embeddings
from greenadapt.errors import InputError, ModelError

UNICODE_WORDS = ["the", "café", "β-blocker", "日本語", "naïve", "🦠", "x" * 300, "ünïcödé"]


def _random(n: int, dim: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, dim)).astype(np.float32)


def test_our_file_loads_in_gensim(tmp_path: Path) -> None:
    from gensim.models import KeyedVectors

    vectors = _random(len(UNICODE_WORDS), 7)
    write_word2vec_binary(tmp_path / "v.bin", UNICODE_WORDS, vectors)
    kv = KeyedVectors.load_word2vec_format(tmp_path / "v.bin", binary=True)
    assert kv.index_to_key == UNICODE_WORDS
    np.testing.assert_array_equal(kv.vectors, vectors)


def test_gensim_file_reads_back_exactly(tmp_path: Path) -> None:
    from gensim.models import KeyedVectors

    vectors = _random(len(UNICODE_WORDS), 5, seed=1)
    kv = KeyedVectors(vector_size=5)
    kv.add_vectors(UNICODE_WORDS, vectors)
    kv.save_word2vec_format(str(tmp_path / "g.bin"), binary=True)
    words, read = read_word2vec_binary(tmp_path / "g.bin")
    assert words == UNICODE_WORDS
    assert read.dtype == np.float32 and read.flags.c_contiguous
    np.testing.assert_array_equal(read, vectors)


def test_c_tool_layout_with_newline_after_each_vector(tmp_path: Path) -> None:
    vectors = _random(3, 4)
    words = ["a", "bb", "ccc"]
    body = b"".join(w.encode() + b" " + v.tobytes() + b"\n" for w, v in zip(words, vectors))
    (tmp_path / "c.bin").write_bytes(b"3 4\n" + body)
    got_words, got = read_word2vec_binary(tmp_path / "c.bin")
    assert got_words == words
    np.testing.assert_array_equal(got, vectors)


def test_vector_bytes_that_look_like_spaces_and_newlines(tmp_path: Path) -> None:
    # 0x20 and 0x0A inside the float bytes must not be taken for separators.
    row = np.frombuffer(b"\x20\x20\x20\x20\x0a\x0a\x0a\x0a", dtype="<f4").reshape(1, 2)
    vectors = np.vstack([row, row]).astype(np.float32)
    write_word2vec_binary(tmp_path / "s.bin", ["w1", "w2"], vectors)
    words, got = read_word2vec_binary(tmp_path / "s.bin")
    assert words == ["w1", "w2"]
    np.testing.assert_array_equal(got, vectors)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    words=st.lists(
        st.text(st.characters(blacklist_categories=("Zs", "Zl", "Zp", "Cc", "Cs")), min_size=1, max_size=12),
        min_size=0,
        max_size=30,
        unique=True,
    ),
    dim=st.integers(1, 9),
)
def test_round_trip_any_words(tmp_path: Path, words: list[str], dim: int) -> None:
    words = [w for w in words if not any(c.isspace() for c in w)]
    vectors = _random(len(words), dim, seed=len(words))
    write_word2vec_binary(tmp_path / "h.bin", words, vectors)
    got_words, got = read_word2vec_binary(tmp_path / "h.bin")
    assert got_words == words
    np.testing.assert_array_equal(got, vectors.reshape(len(words), dim))


def test_limit_reads_the_first_entries(tmp_path: Path) -> None:
    vectors = _random(50, 6)
    words = [f"w{i}" for i in range(50)]
    write_word2vec_binary(tmp_path / "v.bin", words, vectors)
    got_words, got = read_word2vec_binary(tmp_path / "v.bin", limit=7)
    assert got_words == words[:7]
    np.testing.assert_array_equal(got, vectors[:7])


def test_rows_keeps_only_the_chosen_vectors_in_the_given_order(tmp_path: Path) -> None:
    vectors = _random(20, 3)
    words = [f"w{i}" for i in range(20)]
    write_word2vec_binary(tmp_path / "v.bin", words, vectors)
    got_words, got = read_word2vec_binary(tmp_path / "v.bin", rows=[7, 2, 19])
    assert got_words == words
    np.testing.assert_array_equal(got, vectors[[7, 2, 19]])
    assert read_word2vec_binary(tmp_path / "v.bin", rows=[])[1].shape == (0, 3)
    with pytest.raises(ValueError):
        read_word2vec_binary(tmp_path / "v.bin", rows=[20])


def test_a_file_read_whole_serves_later_row_reads_inside_keep_whole_reads(tmp_path: Path) -> None:
    """adapt's align reads every vector; expand's rows are then a view into that matrix, equal to a fresh read."""
    import os

    from greenadapt.adaptation.vectors import keep_whole_reads, read_word2vec_rows

    vectors = _random(30, 4)
    words = [f"w{i}" for i in range(30)]
    path = tmp_path / "v.bin"
    write_word2vec_binary(path, words, vectors)
    rows = [29, 3, 11]
    fresh_words, fresh = read_word2vec_rows(path, rows)
    assert fresh.index is None and fresh_words == words  # outside the block: a compact read of those rows
    with keep_whole_reads():
        _, whole = read_word2vec_binary(path)
        kept_words, kept = read_word2vec_rows(path, rows)
        assert np.shares_memory(kept.matrix, whole) and kept_words == words
        with pytest.raises(ValueError):  # shared by two readers, so neither may change it
            whole[0, 0] = 1.0
        np.testing.assert_array_equal(kept.chunk(0, 3), fresh.chunk(0, 3))
        np.testing.assert_array_equal(kept.chunk(1, 3), vectors[[3, 11]])
        assert len(kept) == 3 and kept.dim == 4
        assert read_word2vec_rows(path, rows)[1].index is None  # taken by the first row read, not held on
        read_word2vec_binary(path)
        # A file changed since (new content, new modification time) is read again, not taken from memory.
        write_word2vec_binary(path, words, vectors * 2)
        os.utime(path, ns=(1, 1))
        _, changed = read_word2vec_rows(path, rows)
        assert changed.index is None
        np.testing.assert_array_equal(changed.chunk(0, 3), 2 * vectors[rows])
    _, after = read_word2vec_rows(path, rows)
    assert after.index is None  # nothing is kept once the block ends


def test_large_file_spanning_many_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import greenadapt.adaptation.vectors as module

    monkeypatch.setattr(module, "_BLOCK", 1000)  # entries straddle block ends
    vectors = _random(2000, 33)
    words = [f"word{i}" * (1 + i % 5) for i in range(2000)]
    write_word2vec_binary(tmp_path / "v.bin", words, vectors)
    got_words, got = read_word2vec_binary(tmp_path / "v.bin")
    assert got_words == words
    np.testing.assert_array_equal(got, vectors)


def test_truncated_file_names_file_and_entry(tmp_path: Path) -> None:
    write_word2vec_binary(tmp_path / "v.bin", ["alpha", "beta", "gamma"], _random(3, 8))
    data = (tmp_path / "v.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(data[:-5])
    with pytest.raises(InputError) as info:
        read_word2vec_binary(tmp_path / "cut.bin")
    assert "truncated" in info.value.message and "entry 3" in info.value.message
    assert info.value.path == str(tmp_path / "cut.bin")
    # Cut inside the first vector: shorter than one vector, still one clear error, not a numpy traceback.
    (tmp_path / "short.bin").write_bytes(data[:20])
    with pytest.raises(InputError, match="truncated.*entry 1"):
        read_word2vec_binary(tmp_path / "short.bin")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"", "first line"),
        (b"hello world\nmore", "first line"),
        (b"3\n", "first line"),
        (b"2 0\n", "dimension 0"),
        (b"1 2\n" + b"x" * 9000, "no word ends"),
        (b"1 2\n\xff\xfe " + b"\0" * 8, "not valid UTF-8"),
        (b"1 2\nnan " + np.array([np.nan, 1], dtype="<f4").tobytes(), "NaN"),
    ],
)
def test_garbage_is_a_clear_input_error(tmp_path: Path, content: bytes, expected: str) -> None:
    (tmp_path / "bad.bin").write_bytes(content)
    with pytest.raises(InputError) as info:
        read_word2vec_binary(tmp_path / "bad.bin")
    assert expected in info.value.message
    assert "bad.bin" in info.value.one_line() and "\n" not in info.value.one_line()


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read"):
        read_word2vec_binary(tmp_path / "absent.bin")


def test_writer_rejects_words_with_whitespace(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        write_word2vec_binary(tmp_path / "v.bin", ["two words"], _random(1, 2))


def test_counts_round_trip_keeps_order(tmp_path: Path) -> None:
    pairs = [("the", 100), ("café", 7), ("日本", 7), ("a\u00a0b", 1)]
    write_counts(tmp_path / "c.tsv", pairs)
    counts = read_counts(tmp_path / "c.tsv")
    assert list(counts.items()) == pairs


def test_counts_malformed_line_names_line(tmp_path: Path) -> None:
    (tmp_path / "c.tsv").write_text("the\t3\nbroken line\nx\t1\n", encoding="utf-8")
    with pytest.raises(InputError) as info:
        read_counts(tmp_path / "c.tsv")
    assert info.value.line == 2


# --------------------------------------------------------------------------
# Embedding matrix from checkpoints


def _reference_embeddings(folder: Path) -> np.ndarray:
    from transformers import AutoModel

    return AutoModel.from_pretrained(folder).get_input_embeddings().weight.detach().numpy()


def test_embeddings_from_safetensors(tiny_bert: Path) -> None:
    got = read_input_embeddings(tiny_bert)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _reference_embeddings(tiny_bert))


def test_embeddings_from_sharded_safetensors_and_bin(tiny_bert_base: Path, tmp_path: Path) -> None:
    import shutil

    import torch
    from safetensors.torch import load_file, save_file

    expected = read_input_embeddings(tiny_bert_base)
    state = load_file(tiny_bert_base / "model.safetensors")
    names = sorted(state)
    sharded = tmp_path / "sharded"
    shutil.copytree(tiny_bert_base, sharded)
    (sharded / "model.safetensors").unlink()
    halves = {"a.safetensors": names[: len(names) // 2], "b.safetensors": names[len(names) // 2 :]}
    for file, keys in halves.items():
        save_file({k: state[k] for k in keys}, sharded / file, metadata={"format": "pt"})
    weight_map = {k: file for file, keys in halves.items() for k in keys}
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    np.testing.assert_array_equal(read_input_embeddings(sharded), expected)

    binary = tmp_path / "bin"
    shutil.copytree(tiny_bert_base, binary)
    (binary / "model.safetensors").unlink()
    torch.save(state, binary / "pytorch_model.bin")
    np.testing.assert_array_equal(read_input_embeddings(binary), expected)


def test_checkpoint_without_embeddings_is_model_error(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    (tmp_path / "config.json").write_text("{}")
    save_file({"encoder.weight": np.zeros((2, 2), np.float32)}, tmp_path / "model.safetensors")
    with pytest.raises(ModelError, match="word_embeddings.weight"):
        read_input_embeddings(tmp_path)


def test_corrupt_safetensors_is_model_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 10**6) + b"{}")
    with pytest.raises(ModelError):
        read_input_embeddings(tmp_path)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_embeddings_read_as_float32(tiny_bert_base: Path, tmp_path: Path, dtype: str) -> None:
    """fp16 rows are read by numpy as they are; bf16 (no numpy type) is widened through torch; both exactly as torch widens them."""
    import torch
    from safetensors.torch import load_file, save_file

    from greenadapt.artifacts.model_weights import read_input_embeddings

    state = {name: tensor.to(getattr(torch, dtype)) for name, tensor in load_file(tiny_bert_base / "model.safetensors").items()}
    folder = tmp_path / dtype
    folder.mkdir()
    save_file(state, folder / "model.safetensors")
    (folder / "config.json").write_text((tiny_bert_base / "config.json").read_text())
    key = next(name for name in state if name.endswith("word_embeddings.weight"))
    rows = read_input_embeddings(folder)
    assert rows.dtype == np.float32 and rows.shape == tuple(state[key].shape)
    assert np.array_equal(rows, state[key].float().numpy())
