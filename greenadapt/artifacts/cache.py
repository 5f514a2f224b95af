"""An entry of a cache greenadapt owns (an ONNX export of a model's weights): a stage like every other.

:class:`CacheEntryRun` is :class:`~greenadapt.artifacts.stage.StageRun` (the entry's lock, its temporary, a manifest
with each file's SHA-256, one rename into place, a killed run's temporary swept) with a cache's rule for what stands
at the entry's name: what does not verify (a damaged file, a link planted there, another model's files under the
key) is made again whole, never written through and never refused for want of ``--force``: the cache's folder is
greenadapt's (its tag is checked by the caller), and everything in it can be made again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from greenadapt.artifacts.manifest import MANIFEST, fingerprint, foreign_files, read_manifest_checked, verify_files
from greenadapt.artifacts.stage import StageRun


def entry_problem(out: Path, kind: str, config: Mapping[str, Any], check: Callable[[Path], str | None]) -> str | None:
    """Why the cache entry at ``out`` cannot be used as ``kind``'s of ``config``, or None: a real folder whose unedited
    manifest is that entry's, holding exactly the files it lists with their recorded SHA-256, and passing ``check``
    (what a manifest cannot vouch for: a manifest can be rewritten for another model's files, their own shapes cannot)."""
    if out.is_symlink() or not out.is_dir():
        return "not a folder greenadapt wrote"
    manifest, damage = read_manifest_checked(out)
    if manifest is None:
        return f"its {MANIFEST} is {damage or 'missing'}"
    if manifest.get("kind") != kind or manifest.get("fingerprint") != fingerprint(kind, config, []):
        return f"its {MANIFEST} is another entry's"
    if foreign_files(out, manifest):
        return "it holds files its manifest does not list"
    return verify_files(out, manifest) or check(out)


class CacheEntryRun(StageRun):
    """Makes one cache entry (``out``, in a cache folder greenadapt made) under its lock; ``skipped`` when another
    process made it while this one waited. Its inputs are in ``config`` (the weights' digest): a copied model folder
    keeps its cache."""

    def __init__(self, kind: str, out: Path, config: Mapping[str, Any], *, check: Callable[[Path], str | None],
                 libraries: tuple[str, ...] = ()) -> None:
        super().__init__(kind, out, config, (), wait=True, libraries=libraries)
        self.check = check

    def _destination(self, out: Path) -> Path:
        return out  # a link planted at the entry's name, to a folder or to nothing, is replaced, never written through

    def _existing_is_current(self) -> bool:
        if self.out.is_symlink():
            self.out.unlink()  # the name is the cache's; the link's target is left as it is
        if not self.out.exists() or entry_problem(self.out, self.kind, self.config, self.check) is not None:
            return False  # (the reader said what was wrong, once; a damaged entry is replaced whole by the swap)
        self.skipped = True
        self.manifest, _ = read_manifest_checked(self.out)
        return True
