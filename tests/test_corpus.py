"""The corpus layer: every format, resolution rules, recipes, URLs and bad input."""

from __future__ import annotations

import bz2
import csv
import gzip
import http.server
import io
import json
import logging
import lzma
import os
import re
import socket
import tarfile
import threading
import tomllib
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from greenadapt.corpus import (
    CORPORA_ENV,
    CorpusSource,
    ReadStats,
    available_corpora,
    remote,
    resolve_corpus,
    source_identities,
)
from greenadapt.redaction import redact_url
from greenadapt.corpus.recipes import bundled_dir
from greenadapt.errors import CorpusError

REPO = Path(__file__).resolve().parent.parent
COMPRESSORS = {"": lambda b: b, ".gz": gzip.compress, ".bz2": bz2.compress, ".xz": lzma.compress}


def read_all(specs: list[str] | str, **kwargs: object) -> tuple[list[str], ReadStats]:
    stats = ReadStats()
    texts = [t for s in resolve_corpus([specs] if isinstance(specs, str) else specs, **kwargs) for t in s.iter_texts(stats)]
    return texts, stats


def write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(COMPRESSORS["".join(s for s in path.suffixes[-1:] if s in COMPRESSORS)](data))
    return path


# --------------------------------------------------------------------------
# Plain text


@pytest.mark.parametrize("ext", ["", ".gz", ".bz2", ".xz"])
def test_text_lines_every_compression(tmp_path: Path, ext: str) -> None:
    raw = "Remdesivir inhibits RNA polymerase.\nCardiomyopathy was rare.\n\nÄrzte und Pneumonitis\n".encode()
    path = write(tmp_path / f"c.txt{ext}", raw)
    texts, stats = read_all(str(path))
    assert texts == ["Remdesivir inhibits RNA polymerase.", "Cardiomyopathy was rare.", "", "Ärzte und Pneumonitis"]
    assert stats.units == 4
    assert stats.bytes_read == len(raw)  # decompressed
    assert stats.raw_bytes_read == path.stat().st_size  # as stored, comparable to size_hint
    assert resolve_corpus([str(path)])[0].size_hint() == path.stat().st_size


def test_crlf_bom_and_missing_final_newline(tmp_path: Path) -> None:
    path = write(tmp_path / "win.txt", "\ufefffirst\r\nsecond\r\nlast".encode())
    assert read_all(str(path))[0] == ["first", "second", "last"]


def test_long_lines_and_crlf_across_read_blocks(tmp_path: Path) -> None:
    lines = ["x" * (3 << 20), "after the long line"] + [f"row {i} {'y' * (i % 97)}" for i in range(40000)]
    data = "\r\n".join(lines).encode() + b"\r\n\xff tail"
    texts, stats = read_all(str(write(tmp_path / "long.txt", data)))
    assert texts == lines + ["\ufffd tail"]
    assert stats.units == len(lines) + 1 and stats.replaced_chars == 1 and stats.bytes_read == len(data)


def test_extensionless_and_odd_suffix_files_are_text(tmp_path: Path) -> None:
    for name in ("corpus", "wiki.2023"):
        write(tmp_path / name, b"a b\n")
        assert read_all(str(tmp_path / name))[0] == ["a b"]


def test_empty_files_yield_nothing(tmp_path: Path) -> None:
    for name in ("e.txt", "e.jsonl", "e.csv"):
        (tmp_path / name).write_bytes(b"")
    write(tmp_path / "e2.txt.gz", b"")
    texts, stats = read_all(str(tmp_path))
    assert texts == [] and stats.units == 0


def test_invalid_utf8_is_replaced_and_counted(tmp_path: Path) -> None:
    path = write(tmp_path / "mixed.txt.gz", b"caf\xe9 latin-1\nok\n\xff\xfe bad \xc3\n")
    texts, stats = read_all(str(path))
    assert texts == ["caf\ufffd latin-1", "ok", "\ufffd\ufffd bad \ufffd"]
    assert stats.replaced_chars == 4


def test_binary_file_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / "model.txt.gz", b"PK\x03\x04\x00\x00binary" * 10)
    with pytest.raises(CorpusError, match="looks binary") as info:
        read_all(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize(
    ("name", "mangle", "pattern"),
    [
        ("t.txt.gz", lambda b: b[: len(b) // 2], "truncated"),
        ("t.txt.xz", lambda b: b[: len(b) // 2], "truncated|corrupt"),
        ("t.txt.bz2", lambda b: b[: len(b) // 2], "truncated|corrupt|not a valid"),
        ("t.txt.gz", lambda b: b"\x1f\x8bnot really gzip" * 4, "not a valid|corrupt"),
    ],
)
def test_truncated_or_corrupt_compressed_file(tmp_path: Path, name: str, mangle: object, pattern: str) -> None:
    data = os.urandom(20000).hex().encode()  # incompressible enough that half is mid-stream
    path = tmp_path / name
    path.write_bytes(mangle(COMPRESSORS[Path(name).suffix](data)))  # type: ignore[operator]
    with pytest.raises(CorpusError, match=pattern) as info:
        read_all(str(path))
    assert info.value.path == str(path)


def test_unsupported_compression_named(tmp_path: Path) -> None:
    path = write(tmp_path / "c.txt.zst", b"x")
    with pytest.raises(CorpusError, match=r"\.zst files are not supported"):
        resolve_corpus([str(path)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(st.text(alphabet=st.characters(exclude_characters="\r\n\x00", exclude_categories=("Cs",)), max_size=40), max_size=30),
    ext=st.sampled_from(["", ".gz", ".bz2", ".xz"]),
    crlf=st.booleans(),
)
def test_any_lines_read_back_identically(tmp_path: Path, lines: list[str], ext: str, crlf: bool) -> None:
    if lines and lines[0].startswith("\ufeff"):
        lines[0] = lines[0].lstrip("\ufeff") or "x"  # a leading BOM is an encoding mark, dropped by design
    newline = "\r\n" if crlf else "\n"
    path = tmp_path / f"prop{ext}{'.txt' if not ext else ''}"
    path = path.with_name(f"prop-{len(lines)}-{crlf}.txt{ext}")
    path.write_bytes(COMPRESSORS[ext]("".join(line + newline for line in lines).encode()))
    texts, stats = read_all(str(path))
    assert texts == lines
    assert stats.replaced_chars == 0


# --------------------------------------------------------------------------
# JSON lines, CSV, TSV


def test_jsonl_fields(tmp_path: Path) -> None:
    records = [
        {"title": "Myocarditis after vaccination", "abstract": "Rare.\nMostly mild.", "id": 1},
        {"title": "No abstract", "abstract": None},
        {"title": "", "abstract": ""},  # nothing to read: not a unit
        {"title": ["a", "list"], "abstract": 3},
    ]
    path = write(tmp_path / "p.jsonl.gz", "".join(json.dumps(r) + "\n" for r in records).encode())
    texts, stats = read_all(str(path), text_fields=["title", "abstract"])
    assert texts == ["Myocarditis after vaccination\nRare.\nMostly mild.", "No abstract", "a\nlist\n3"]
    assert stats.units == 3 and stats.skipped_records == 0
    assert read_all(str(path), text_fields=["title"])[0][0] == "Myocarditis after vaccination"


def test_jsonl_missing_field_names_file_line_and_keys(tmp_path: Path) -> None:
    path = write(tmp_path / "p.ndjson", b'\n{"abstract": "x", "cord_uid": "u1"}\n')
    with pytest.raises(CorpusError) as info:
        read_all(str(path))
    message = str(info.value)
    assert f"{path}:2" in message and "'text'" in message and "'abstract', 'cord_uid'" in message
    assert "--text-field" in message


def test_jsonl_malformed_lines_skipped_counted_warned(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = [json.dumps({"text": f"sentence {i}"}) for i in range(30)]
    lines = good[:10] + ["{broken", "[1, 2]"] + good[10:]
    path = write(tmp_path / "p.json", "\n".join(lines).encode())
    with caplog.at_level(logging.WARNING, logger="greenadapt.corpus"):
        texts, stats = read_all(str(path))
    assert texts == [f"sentence {i}" for i in range(30)]
    assert stats.skipped_records == 2
    assert f"{path}:11" in caplog.text and f"{path}:12" in caplog.text


def test_jsonl_mostly_malformed_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path / "p.jsonl", b'{"text": "ok"}\n' + b"not json\n" * 40)
    with pytest.raises(CorpusError, match="malformed"):
        read_all(str(path))
    pretty = write(tmp_path / "pretty.json", json.dumps([{"text": "a"}], indent=2).encode())
    with pytest.raises(CorpusError, match="one JSON object per line"):
        read_all(str(pretty))


def test_csv_and_tsv_columns(tmp_path: Path) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerows([["id", "text", "label"], ["1", "Glioblastoma is aggressive.\nTemozolomide helps.", "x"], ["2", "", "y"],
                      ["3", "Short"]])
    path = write(tmp_path / "d.csv.bz2", ("\ufeff" + buffer.getvalue()).encode())
    assert read_all(str(path))[0] == ["Glioblastoma is aggressive.\nTemozolomide helps.", "Short"]
    # TSV is unquoted: a quote character is text, not a field delimiter.
    tsv = write(tmp_path / "d.tsv", b'sentence\tlabel\nHe said "stop\t1\nsecond "row"\t0\n')
    assert read_all(str(tsv), text_fields=["sentence"])[0] == ['He said "stop', 'second "row"']
    with pytest.raises(CorpusError, match=r"d\.tsv:1: no text field 'text'.*'sentence', 'label'"):
        read_all(str(tsv))


# --------------------------------------------------------------------------
# CORD-19 release tarball and PubMed XML


def _tar_bytes(members: dict[str, bytes], mode: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _parse(paper_id: str, *paragraphs: str) -> bytes:
    body = [{"text": p, "section": "Intro", "cite_spans": []} for p in paragraphs]
    return json.dumps({"paper_id": paper_id, "metadata": {"title": "t"}, "abstract": [], "body_text": body}).encode()


def make_cord19(path: Path, *, metadata_first: bool = True) -> Path:
    metadata = io.StringIO()
    writer = csv.writer(metadata)
    writer.writerow(["cord_uid", "title", "abstract", "pdf_json_files", "pmc_json_files"])
    writer.writerow(["u1", "Remdesivir in COVID-19", "An antiviral,\nstudied.", "document_parses/pdf_json/aaa.json",
                     "document_parses/pmc_json/PMC1.xml.json"])
    writer.writerow(["u2", "Pneumonitis", "", "document_parses/pdf_json/bbb.json", ""])
    parses = _tar_bytes(
        {
            "document_parses/pdf_json/aaa.json": _parse("aaa", "PDF duplicate of PMC1."),
            "document_parses/pmc_json/PMC1.xml.json": _parse("PMC1", "Body one.", "Body two."),
            "document_parses/pdf_json/bbb.json": _parse("bbb", "Body of bbb."),
            "document_parses/pdf_json/broken.json": b"{not json",
        },
        "w:gz",
    )
    members = {"2022-06-02/metadata.csv": metadata.getvalue().encode(), "2022-06-02/document_parses.tar.gz": parses,
               "2022-06-02/cord_19_embeddings.tar.gz": b"\x00" * 100}
    if not metadata_first:
        members = dict(reversed(list(members.items())))
    path.write_bytes(_tar_bytes(members, "w:gz"))
    return path


def test_cord19_tarball_streamed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = make_cord19(tmp_path / "cord-19_2022-06-02.tar.gz")
    [source] = resolve_corpus([str(path)])
    assert source.format == "s2orc-tar"
    stats = ReadStats()
    with caplog.at_level(logging.WARNING):
        texts = list(source.iter_texts(stats))
    assert texts == ["Remdesivir in COVID-19\nAn antiviral,\nstudied.", "Pneumonitis", "Body one.\nBody two.", "Body of bbb."]
    assert stats.skipped_records == 1 and "broken.json" in caplog.text
    assert not list(tmp_path.glob("**/*.json"))  # nothing extracted to disk


def test_cord19_parses_before_metadata_read_all(tmp_path: Path) -> None:
    path = make_cord19(tmp_path / "cord.tar.gz", metadata_first=False)
    texts, _ = read_all(str(path))
    assert "PDF duplicate of PMC1." in texts and "Pneumonitis" in texts


PUBMED_ARTICLE = """<PubmedArticle><MedlineCitation><PMID>{i}</PMID><Article>
<ArticleTitle>Hydroxychloroquine and <i>thrombocytopenia</i> {i}.</ArticleTitle>
<Abstract><AbstractText Label="BACKGROUND">Background {i}.</AbstractText>\
<AbstractText Label="RESULTS">Results<sup>2</sup> {i}.</AbstractText></Abstract>
</Article></MedlineCitation></PubmedArticle>
"""


def make_pubmed(path: Path, n: int) -> Path:
    head = ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE PubmedArticleSet PUBLIC "-//NLM//DTD PubMedArticle, 1st January 2025//EN" '
            '"https://dtd.nlm.nih.gov/ncbi/pubmed/out/pubmed_250101.dtd">\n<PubmedArticleSet>\n')
    body = "".join(PUBMED_ARTICLE.format(i=i) for i in range(n))
    no_abstract = ("<PubmedArticle><MedlineCitation><Article><ArticleTitle>Title "
                   "only.</ArticleTitle></Article></MedlineCitation></PubmedArticle>")
    deleted = "<DeleteCitation><PMID>1</PMID></DeleteCitation>"
    path.write_bytes(gzip.compress((head + body + no_abstract + deleted + "</PubmedArticleSet>\n").encode()))
    return path


def test_pubmed_xml(tmp_path: Path) -> None:
    path = make_pubmed(tmp_path / "pubmed25n0001.xml.gz", 3)
    texts, stats = read_all(str(path))
    assert texts[0] == "Hydroxychloroquine and thrombocytopenia 0.\nBackground 0.\nResults2 0."
    assert texts[-1] == "Title only." and stats.units == 4


def _peak_bytes(path: Path) -> tuple[int, int]:
    [source] = resolve_corpus([str(path)])
    tracemalloc.start()
    try:
        count = sum(1 for _ in source.iter_texts(ReadStats()))
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_pubmed_memory_stays_flat(tmp_path: Path) -> None:
    _peak_bytes(make_pubmed(tmp_path / "warm.xml.gz", 10))  # first-use imports are not the reader's memory
    small_count, small_peak = _peak_bytes(make_pubmed(tmp_path / "small.xml.gz", 300))
    big_count, big_peak = _peak_bytes(make_pubmed(tmp_path / "big.xml.gz", 3000))  # ~1 MB of XML
    assert (small_count, big_count) == (301, 3001)
    # Fixed read buffers dominate; 2,700 more articles kept in the tree would add several MB.
    assert big_peak < small_peak + 1_000_000, f"peak {big_peak} vs {small_peak}: articles are not being freed"


def test_pubmed_truncated_xml(tmp_path: Path) -> None:
    path = tmp_path / "cut.xml"
    path.write_bytes(b"<PubmedArticleSet><PubmedArticle><MedlineCitation><Article><ArticleTitle>x</ArticleTitle>")
    with pytest.raises(CorpusError, match=r"cut\.xml:1: malformed XML"):
        read_all(str(path))


# --------------------------------------------------------------------------
# Folders, globs, names


def test_folder_recursive_sorted_supported_only(tmp_path: Path) -> None:
    write(tmp_path / "b" / "2.txt", b"b2\n")
    write(tmp_path / "a.txt.gz", b"a\n")
    write(tmp_path / "b" / "1.jsonl", b'{"text": "b1"}\n')
    write(tmp_path / "c.gz", b"c\n")
    write(tmp_path / "notes.md", b"not a corpus\n")
    write(tmp_path / "README", b"not a corpus\n")
    write(tmp_path / ".hidden" / "x.txt", b"hidden\n")
    write(tmp_path / ".x.txt", b"hidden\n")
    sources = resolve_corpus([str(tmp_path)])
    assert [Path(s.uri).relative_to(tmp_path).as_posix() for s in sources] == ["a.txt.gz", "b/1.jsonl", "b/2.txt", "c.gz"]
    assert all(Path(s.uri).is_absolute() for s in sources)
    assert read_all(str(tmp_path))[0] == ["a", "b1", "b2", "c"]


def test_glob_and_missing_paths(tmp_path: Path) -> None:
    for name in ("p2.txt", "p10.txt", "q.txt"):
        write(tmp_path / name, name.encode())
    assert [Path(s.uri).name for s in resolve_corpus([str(tmp_path / "p*.txt")])] == ["p10.txt", "p2.txt"]
    with pytest.raises(CorpusError, match="no file matches") as info:
        resolve_corpus([str(tmp_path / "z*.txt")])
    assert str(tmp_path / "z*.txt") in str(info.value)
    with pytest.raises(CorpusError, match="no such file") as info:
        resolve_corpus([str(tmp_path / "missing.txt")])
    assert str(tmp_path / "missing.txt") in str(info.value)
    with pytest.raises(CorpusError, match="no corpus files"):
        (tmp_path / "empty").mkdir()
        resolve_corpus([str(tmp_path / "empty")])


def test_same_file_twice_is_read_once(tmp_path: Path) -> None:
    path = write(tmp_path / "a.txt", b"x\n")
    assert len(resolve_corpus([str(path), str(tmp_path), str(tmp_path / "*.txt")])) == 1


def test_unknown_name_lists_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CORPORA_ENV, raising=False)
    with pytest.raises(CorpusError) as info:
        resolve_corpus(["cord20"])
    assert "unknown corpus 'cord20'" in str(info.value)
    assert "cord19, go-text, pubmed, sample" in str(info.value)


def test_bundled_recipes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CORPORA_ENV, raising=False)
    corpora = available_corpora()
    assert {"cord19", "go-text", "pubmed", "sample"} <= set(corpora)
    cord = corpora["cord19"]
    assert [s.uri for s in cord.sources] == [
        "https://ai2-semanticscholar-cord-19.s3-us-west-2.amazonaws.com/historical_releases/cord-19_2022-06-02.tar.gz"
    ]
    assert cord.sources[0].format == "s2orc-tar" and cord.homepage and cord.license and cord.citation
    pubmed = corpora["pubmed"].sources
    assert len(pubmed) == 1274 and {s.format for s in pubmed} == {"pubmed-xml"}
    assert pubmed[0].uri.endswith("/pubmed25n0001.xml.gz") and pubmed[-1].uri.endswith("/pubmed25n1274.xml.gz")
    assert "change" in corpora["pubmed"].description


def test_bundled_sample_corpus() -> None:
    [source] = resolve_corpus(["sample"])
    assert source.format == "text" and Path(source.uri).is_file()
    assert Path(source.uri).stat().st_size <= 1_500_000
    stats = ReadStats()
    lines = list(source.iter_texts(stats))
    tokens = sum(len(re.findall(r"\w+|[^\w\s]", line)) for line in lines)
    assert 350_000 <= tokens <= 450_000 and stats.replaced_chars == 0
    assert all(line[:1].isalnum() and line.endswith(".") for line in lines)
    assert len(set(lines)) > 0.8 * len(lines)  # varied, not a few sentences repeated


def test_sample_generator_is_deterministic_and_matches_shipped_file(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_sample", bundled_dir() / "make_sample.py")  # type: ignore[operator]
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    shipped = gzip.decompress((bundled_dir() / "sample.txt.gz").read_bytes())  # type: ignore[operator]
    assert ("\n".join(module.generate()) + "\n").encode() == shipped
    first, second = tmp_path / "1.txt.gz", tmp_path / "2.txt.gz"
    module.main(["--out", str(first), "--tokens", "3000"])
    module.main(["--out", str(second), "--tokens", "3000"])
    assert first.read_bytes() == second.read_bytes()  # no timestamp in the gzip header
    assert module.generate(seed=1, tokens=500) != module.generate(seed=2, tokens=500)


def test_user_recipes_override_and_resolve(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "recipes"
    write(folder / "data" / "notes.jsonl", b'{"body": "Pneumonitis notes."}\n')
    (folder / "sample.toml").write_text('description = "mine"\n[[sources]]\npath = "data/notes.jsonl"\ntext_fields = ["body"]\n')
    (folder / "parts.toml").write_text('[[sources]]\nurl_template = "https://example.org/p{n:03d}.txt.gz"\nrange = [8, 11]\n')
    (folder / "broken.toml").write_text("description = \n")
    monkeypatch.setenv(CORPORA_ENV, os.pathsep.join([str(tmp_path / "absent"), str(folder)]))
    corpora = available_corpora()  # the broken recipe is skipped, with a warning
    assert corpora["sample"].description == "mine" and "broken" not in corpora and "cord19" in corpora
    assert read_all("sample")[0] == ["Pneumonitis notes."]
    assert [s.uri.rsplit("/", 1)[1] for s in resolve_corpus(["parts"])] == ["p008.txt.gz", "p009.txt.gz", "p010.txt.gz", "p011.txt.gz"]
    with pytest.raises(CorpusError, match=r"broken\.toml:1: invalid TOML"):
        resolve_corpus(["broken"])


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        ('[[sources]]\nurl = "https://x/a.txt"\nformats = "text"\n', "unknown key.*formats"),
        ('description = "no sources"\n', "no \\[\\[sources\\]\\]"),
        ('[[sources]]\nurl = "https://x/a"\npath = "a"\n', "exactly one of"),
        ('[[sources]]\nurl_template = "https://x/{i}"\nrange = [1, 2]\n', "not a format string"),
        ('[[sources]]\nurl_template = "https://x/{n}"\nrange = [3, 2]\n', "range"),
        ('[[sources]]\nurl = "https://x/a"\nformat = "parquet"\n', "unknown format"),
        ('name = "other"\n[[sources]]\nurl = "https://x/a"\n', "differs from its file name"),
    ],
)
def test_bad_recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, pattern: str) -> None:
    (tmp_path / "bad.toml").write_text(body)
    monkeypatch.setenv(CORPORA_ENV, str(tmp_path))
    with pytest.raises(CorpusError, match=pattern) as info:
        resolve_corpus(["bad"])
    assert str(tmp_path / "bad.toml") in str(info.value)


def test_recipe_with_missing_local_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gone.toml").write_text('[[sources]]\npath = "nowhere.txt"\n')
    monkeypatch.setenv(CORPORA_ENV, str(tmp_path))
    with pytest.raises(CorpusError, match="does not exist.*nowhere.txt"):
        resolve_corpus(["gone"])


def test_identity_and_text_field_override(tmp_path: Path) -> None:
    path = write(tmp_path / "a.jsonl", b'{"t": "x"}\n')
    [source] = resolve_corpus([str(path)], text_fields=["t"])
    ident = source.identity()
    assert ident["path"] == str(path) and ident["size"] == path.stat().st_size and "mtime_ns" in ident
    assert ident["text_fields"] == ["t"] and ident["format"] == "jsonl"
    with pytest.raises(CorpusError, match="unknown corpus format"):
        CorpusSource(str(path), "parquet")


def test_packaging_lists_every_package() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    on_disk = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "greenadapt").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert on_disk - listed == set(), "add these packages to [tool.setuptools] packages in pyproject.toml"
    assert config["package-dir"]["greenadapt.corpora"] == "corpora"
    assert {"*.toml", "*.txt.gz"} <= set(config["package-data"]["greenadapt.corpora"])


# --------------------------------------------------------------------------
# URLs, served from a local thread


class _Server:
    """A one-file HTTP server on 127.0.0.1 with Range support and scripted failures."""

    def __init__(self, payload: bytes, *, drops: int = 0, cut_at: int = 0, status: int = 200, ranges: bool = True) -> None:
        self.payload = payload
        self.drops = drops  # how many responses end early (-1: all)
        self.cut_at = cut_at  # bytes sent before a drop
        self.status = status
        self.ranges = ranges
        self.requests: list[dict[str, str]] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(server.payload)))
                self.send_header("ETag", '"v1"')
                self.end_headers()

            def do_GET(self) -> None:
                server.requests.append(dict(self.headers))
                if server.status != 200:
                    self.send_error(server.status)
                    return
                start = 0
                match = re.match(r"bytes=(\d+)-", self.headers.get("Range", ""))
                if match and server.ranges:
                    start = int(match.group(1))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(server.payload) - 1}/{len(server.payload)}")
                else:
                    self.send_response(200)
                body = server.payload[start:]
                self.send_header("Content-Length", str(len(body)))
                self.send_header("ETag", '"v1"')
                self.end_headers()
                if server.drops:
                    server.drops -= 1 if server.drops > 0 else 0
                    self.wfile.write(body[: server.cut_at])
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def url(self, path: str = "/corpus.txt.gz", auth: str = "", query: str = "") -> str:
        return f"http://{auth}127.0.0.1:{self.httpd.server_address[1]}{path}{query}"

    def __enter__(self) -> _Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fast_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(remote, "HTTP_BACKOFF_S", 0.0)


LINES = [f"line {i} thrombocytopenia remdesivir {'x' * (i % 50)}" for i in range(20000)]


@pytest.fixture(scope="module")
def payload() -> bytes:
    return gzip.compress(("\n".join(LINES) + "\n").encode(), compresslevel=1)


def test_url_streams(payload: bytes) -> None:
    with _Server(payload) as server:
        [source] = resolve_corpus([server.url()])
        assert source.format == "text" and source.size_hint() == len(payload)
        ident = source.identity()
        assert ident == {"url": server.url(), "etag": '"v1"', "size": len(payload), "format": "text"}
        stats = ReadStats()
        assert list(source.iter_texts(stats)) == LINES
        assert stats.raw_bytes_read == len(payload)


def test_url_dropped_once_is_resumed_identically(payload: bytes, fast_retries: None) -> None:
    with _Server(payload, drops=1, cut_at=len(payload) // 3) as server:
        assert read_all(server.url())[0] == LINES
        assert len(server.requests) == 2
        assert server.requests[1]["Range"] == f"bytes={len(payload) // 3}-"
        assert server.requests[1]["If-Range"] == '"v1"'


def test_url_server_ignoring_ranges_is_resumed_by_skipping(payload: bytes, fast_retries: None) -> None:
    with _Server(payload, drops=1, cut_at=len(payload) // 2, ranges=False) as server:
        assert read_all(server.url())[0] == LINES


def test_url_always_dropping_fails_clearly(payload: bytes, fast_retries: None) -> None:
    with _Server(payload, drops=-1, cut_at=1000) as server:
        with pytest.raises(CorpusError, match=r"download failed at byte \d+ after 3 retries") as info:
            read_all(server.url())
        assert info.value.path == server.url()
        assert len(server.requests) == 1 + remote.HTTP_RETRIES


def test_url_credentials_never_shown(payload: bytes, fast_retries: None) -> None:
    with _Server(payload, status=404) as server:
        secret_url = server.url(
            "/private/c.txt.gz", auth="alice:s3cr3tPass@", query="?X-Amz-Signature=deadbeef99&X-Amz-Date=20250101&part=2"
        )
        [source] = resolve_corpus([secret_url])
        public = server.url("/private/c.txt.gz", query="?part=2")
        assert source.uri == public and "s3cr3t" not in repr(source)
        assert source.identity()["url"] == public
        with pytest.raises(CorpusError) as info:
            list(source.iter_texts(ReadStats()))
        text = info.value.one_line()
        assert "HTTP 404" in text and public in text
        assert not any(s in text for s in ("s3cr3tPass", "deadbeef99", "alice", "20250101"))
        assert server.requests[0]["Authorization"].startswith("Basic ")  # the credentials were still used


def test_url_unreachable(fast_retries: None) -> None:
    from conftest import free_port

    url = f"http://user:pw123456@127.0.0.1:{free_port()}/c.txt"
    with pytest.raises(CorpusError, match="after 3 retries") as info:
        read_all(url)
    assert "pw123456" not in str(info.value)


def test_redact_url_forms() -> None:
    cases = {
        "https://bucket.s3.amazonaws.com/k.gz?X-Amz-Algorithm=A&X-Amz-Credential=AKIA%2F1&X-Amz-Signature=abc123":
            "https://bucket.s3.amazonaws.com/k.gz",
        "https://host/x.txt?token=t0ps3cret&page=2": "https://host/x.txt?page=2",
        "https://acct.blob.core.windows.net/c/x.txt?sv=2020&se=2030&sp=r&sig=s1gnature": "https://acct.blob.core.windows.net/c/x.txt",
        "s3://KEYID:SECRETKEY@bucket/k.txt": "s3://bucket/k.txt",
        "https://host/plain.txt?v=1": "https://host/plain.txt?v=1",
    }
    for url, public in cases.items():
        redacted = redact_url(url)
        assert redacted.public == public
        assert redacted.scrub(f"failed: {url}") == f"failed: {public}"


def test_source_identities_batches_heads(payload: bytes) -> None:
    with _Server(payload) as server:
        sources = resolve_corpus([server.url(f"/p{i}.txt.gz") for i in range(5)])
        idents = source_identities(sources)
    assert [i["size"] for i in idents] == [len(payload)] * 5


def test_iter_texts_is_lazy(tmp_path: Path) -> None:
    # Nothing is opened until iteration starts, so resolving a huge recipe is cheap.
    path = write(tmp_path / "a.txt", b"x\n")
    [source] = resolve_corpus([str(path)])
    iterator: Iterator[str] = source.iter_texts(ReadStats())
    path.unlink()
    with pytest.raises(CorpusError, match="cannot open"):
        next(iterator)


# --------------------------------------------------------------------------
# The real data in ../shared/data (skipped when absent)


@pytest.mark.integration
def test_shared_biomed_corpus(shared_data: Path) -> None:
    path = shared_data / "corpora" / "biomed-10m.txt.gz"
    texts, stats = read_all(str(path))
    with gzip.open(path, "rt", encoding="utf-8", newline="") as handle:
        expected = [line.rstrip("\n").removesuffix("\r") for line in handle]
    assert texts == expected and len(texts) > 300_000
    assert stats.raw_bytes_read == path.stat().st_size and stats.replaced_chars == 0


@pytest.mark.integration
def test_shared_cord19_abstracts(shared_data: Path) -> None:
    path = shared_data / "corpora" / "cord19-abstracts-sample.jsonl"
    texts, stats = read_all(str(path), text_fields=["title", "abstract"])
    assert len(texts) == 4208 and stats.skipped_records == 0
    with pytest.raises(CorpusError, match=r"no text field 'text'.*'cord_uid'"):
        read_all(str(path))

