"""The corpus layer: named corpora, files, folders, globs and URLs, streamed.

>>> sources = resolve_corpus(["sample", "notes/*.txt.gz", "https://host/abstracts.jsonl.gz"])
>>> stats = ReadStats()
>>> for source in sources:
...     for text in source.iter_texts(stats):   # a line, or a document ("\\n" = sentence break)
...         ...

Everything is read as a stream in constant memory (one line, record or
article at a time); nothing is downloaded or extracted to disk first.
Bad input raises :class:`greenadapt.errors.CorpusError` naming the file
(and line), except invalid UTF-8 (replaced, counted in
``ReadStats.replaced_chars``) and isolated malformed records (skipped,
counted in ``ReadStats.skipped_records``).
"""

from __future__ import annotations

from greenadapt.corpus.formats import FORMATS, ReadStats
from greenadapt.corpus.recipes import CORPORA_ENV, Recipe, available_corpora, find_recipe
from greenadapt.corpus.resolve import resolve_corpus
from greenadapt.corpus.source import CorpusSource

__all__ = [
    "CORPORA_ENV",
    "FORMATS",
    "CorpusSource",
    "ReadStats",
    "Recipe",
    "available_corpora",
    "find_recipe",
    "resolve_corpus",
    "source_identities",
]


def source_identities(sources: list[CorpusSource], *, threads: int = 16) -> list[dict]:
    """``[s.identity() for s in sources]``, with the HEAD requests of URL sources made concurrently.

    A recipe such as ``pubmed`` has over a thousand URLs; one HEAD after
    another would add minutes to every fingerprint.
    """
    from concurrent.futures import ThreadPoolExecutor

    remote = [s for s in sources if s.is_url]
    if len(remote) > 1:
        with ThreadPoolExecutor(max_workers=max(1, min(threads, len(remote)))) as pool:
            list(pool.map(CorpusSource.size_hint, remote))  # fills each source's HEAD cache
    return [s.identity() for s in sources]
