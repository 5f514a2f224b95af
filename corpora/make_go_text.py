"""Build ``go-text.txt.gz``: the text of the Gene Ontology, a real biomedical corpus that may be redistributed.

Every current (not obsolete) GO term gives its name, its definition and its
synonyms, one per line, in GO id order. The Gene Ontology is released under
CC BY 4.0 (http://geneontology.org/docs/go-citation-policy/), so this text
ships with greenadapt with its attribution in ``go-text.toml``; the only
changes are the selection of those three fields and the one-per-line layout.

The bundled file was made from the GO release of 2022-07-01, as Debian's
``r-bioc-go.db`` 3.16.0 carries it (``GO.sqlite``); GO's own ``go-basic.obo``
gives the same fields::

    python corpora/make_go_text.py --obo go-basic.obo              # rewrites corpora/go-text.txt.gz
    apt-get download r-bioc-go.db && dpkg-deb -x r-bioc-go.db_*.deb go.db
    python corpora/make_go_text.py --sqlite go.db/usr/lib/R/site-library/GO.db/extdata/GO.sqlite

Deterministic: the same input gives the same bytes (fixed gzip header).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import re
import sqlite3
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

OUT = Path(__file__).resolve().parent / "go-text.txt.gz"
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def terms_from_obo(lines: Iterable[str]) -> Iterator[tuple[str, list[str]]]:
    """(GO id, [name, definition, synonyms...]) of each current term of an OBO file."""
    stanza: dict[str, list[str]] = {}
    kind = ""
    for raw in itertools.chain(lines, ["[End]"]):  # the last stanza ends at the end of the file
        line = raw.rstrip("\n")
        if line.startswith("["):
            if kind == "[Term]" and stanza.get("id") and "true" not in stanza.get("is_obsolete", []):
                yield stanza["id"][0], _texts(stanza)
            kind, stanza = line.strip(), {}
            continue
        key, separator, value = line.partition(": ")
        if separator:
            stanza.setdefault(key, []).append(value)


def _texts(stanza: dict[str, list[str]]) -> list[str]:
    texts = list(stanza.get("name", []))
    for value in stanza.get("def", []) + stanza.get("synonym", []):
        quoted = _QUOTED.match(value)
        if quoted:
            texts.append(re.sub(r"\\(.)", r"\1", quoted.group(1)))
    return texts


def terms_from_sqlite(path: Path) -> Iterator[tuple[str, list[str]]]:
    """The same from Bioconductor's GO.db ``GO.sqlite`` (its go_term table holds current terms only)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        synonyms: dict[int, list[str]] = {}
        for term_key, synonym in connection.execute("SELECT _id, synonym FROM go_synonym WHERE like_go_id = 0 ORDER BY rowid"):
            synonyms.setdefault(term_key, []).append(synonym)
        rows = connection.execute("SELECT _id, go_id, term, definition FROM go_term WHERE go_id LIKE 'GO:%' ORDER BY go_id")
        for term_key, go_id, name, definition in rows:
            yield go_id, [name, *([definition] if definition else []), *synonyms.get(term_key, [])]
    finally:
        connection.close()


def write(terms: Iterable[tuple[str, list[str]]], out: Path) -> tuple[int, int]:
    """Write one text per line (in GO id order); returns (terms, lines)."""
    n_terms = n_lines = 0
    partial = out.with_name(out.name + ".part")
    with open(partial, "wb") as raw, gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as sink:
        for _, texts in sorted(terms):
            n_terms += 1
            for text in texts:
                text = " ".join(text.split())
                if text:
                    sink.write(text.encode("utf-8") + b"\n")
                    n_lines += 1
    partial.replace(out)
    return n_terms, n_lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--obo", type=Path, help="GO's go-basic.obo (or go.obo)")
    source.add_argument("--sqlite", type=Path, help="GO.sqlite of Bioconductor's GO.db")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.obo:
        with open(args.obo, encoding="utf-8") as obo:
            n_terms, n_lines = write(terms_from_obo(obo), args.out)
    else:
        n_terms, n_lines = write(terms_from_sqlite(args.sqlite), args.out)
    print(f"{n_terms:,} terms, {n_lines:,} lines -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
