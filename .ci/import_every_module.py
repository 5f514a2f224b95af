"""Imports every module of the installed greenadapt; run from outside the checkout so nothing comes from the source tree.

A module may fail only the way an optional extra's module should: ModuleNotFoundError for a distribution one of
greenadapt's extras declares and this environment lacks, with a message that names the extra to install. Anything
else (a missing core dependency, a syntax error, an extra's module that fails with a traceback) fails the check.
"""

import importlib
import importlib.metadata
import pkgutil
import re
import sys

import greenadapt


def extras_by_distribution() -> dict[str, set[str]]:
    """'spacy' -> {'spacy', 'test'}: which extras declare each optional distribution (names normalized)."""
    declared: dict[str, set[str]] = {}
    for requirement in importlib.metadata.requires("greenadapt") or []:
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if extra:
            distribution = re.match(r"[A-Za-z0-9._-]+", requirement)
            assert distribution, requirement
            declared.setdefault(normalize(distribution.group(0)), set()).add(extra.group(1))
    return declared


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def main() -> int:
    assert "site-packages" in greenadapt.__file__, f"greenadapt imported from {greenadapt.__file__}, not the installed wheel"
    optional = extras_by_distribution()
    failures, skipped = [], []
    for module in pkgutil.walk_packages(greenadapt.__path__, "greenadapt."):
        if module.name.endswith("__main__"):
            continue
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as missing:
            top = normalize((missing.name or "").split(".")[0])
            extras = optional.get(top, set())
            if not any(f"greenadapt[{extra}]" in str(missing) for extra in extras):
                failures.append(f"{module.name}: {missing!r} (not an extra's module that names its extra)")
            else:
                skipped.append(f"{module.name} (needs {top}: {missing})")
        except Exception as error:  # noqa: BLE001 - every failure is reported, the check fails below
            failures.append(f"{module.name}: {error!r}")
    for line in skipped:
        print(f"skipped, optional: {line}", file=sys.stderr)
    for line in failures:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
