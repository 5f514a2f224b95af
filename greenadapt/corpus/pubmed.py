"""PubMed / MEDLINE XML baseline files: the title and abstract of each article, streamed."""

from __future__ import annotations

from collections.abc import Iterator
from typing import IO, Any

from greenadapt.corpus.formats import ReadStats, Source
from greenadapt.errors import CorpusError


def read_pubmed_xml(source: Source, stream: IO[bytes], stats: ReadStats) -> Iterator[str]:
    """ArticleTitle and AbstractText of each article, memory flat however large the file.

    Each finished article is cleared from the tree; ElementTree fetches no
    external DTD or entity, and expat bounds entity expansion.
    """
    import xml.etree.ElementTree as ET

    root = None
    try:
        for event, element in ET.iterparse(stream, events=("start", "end")):
            if root is None:
                root = element
                continue
            if event != "end" or element.tag not in ("PubmedArticle", "PubmedBookArticle"):
                continue
            parts = [_element_text(e) for e in element.iter("ArticleTitle")]
            if not any(parts):
                parts = [_element_text(e) for e in element.iter("BookTitle")]
            for abstract in element.iter("Abstract"):
                parts += [_element_text(e) for e in abstract.iter("AbstractText")]
            root.clear()
            text = "\n".join(p for p in parts if p)
            if text:
                stats.units += 1
                yield text
    except ET.ParseError as exc:
        raise CorpusError(
            f"malformed XML ({exc})",
            path=source.display,
            line=exc.position[0] if exc.position else None,
            hint="PubMed baseline files are XML; download it again if it was cut short",
        ) from None


def _element_text(element: Any) -> str:
    # Titles and abstracts hold inline markup (<i>, <sup>); keep all its text.
    return " ".join("".join(element.itertext()).split())
