"""The package's folders import only downwards, in the order docs/design.md draws.

Each top-level folder or module of ``greenadapt/`` has a place in :data:`LAYERS`; an import from one
to another is allowed only towards a later place. A new folder must be given its place here (and in
the picture), so the direction of imports is decided, not grown.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import greenadapt

LAYERS = [
    "__main__", "cli", "api", "reporting", "comparison", "runners", "inference", "adaptation", "corpus",
    "tasks", "training", "compute", "modeling", "data", "artifacts", "families", "machine", "options", "structured_text", "defaults",
    "progress", "switches", "errors", "redaction", "version",
]
ROOT = Path(greenadapt.__file__).parent


def _imports_between_folders() -> set[tuple[str, str, str]]:
    """(importing folder, imported folder, file) for every import of another top-level part of the package."""
    found = set()
    for path in ROOT.rglob("*.py"):
        part = path.relative_to(ROOT).parts[0].removesuffix(".py")
        if part == "__init__":  # the root itself: it re-exports the API and its version
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("greenadapt."):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names if alias.name.startswith("greenadapt.")]
            else:
                continue
            for name in names:
                target = name.split(".")[1]
                if target != part:
                    found.add((part, target, str(path.relative_to(ROOT))))
    return found


def test_every_part_of_the_package_has_a_layer() -> None:
    parts = {p.name.removesuffix(".py") for p in ROOT.iterdir() if (p.suffix == ".py" or (p / "__init__.py").is_file())}
    assert parts - {"__init__"} == set(LAYERS)


def test_imports_only_go_down() -> None:
    upward = sorted(
        f"{file}: {source} imports {target}"
        for source, target, file in _imports_between_folders()
        if LAYERS.index(target) <= LAYERS.index(source)
    )
    assert not upward, "imports against the layer order (docs/design.md):\n" + "\n".join(upward)


def test_the_check_sees_imports() -> None:
    # Guards the guard: the scan must find the imports it judges, or the test above passes on nothing.
    edges = {(source, target) for source, target, _ in _imports_between_folders()}
    assert ("cli", "runners") in edges and ("api", "options") in edges and ("runners",
                                                                            "training") in edges and ("inference", "tasks") in edges


def _root_imports() -> list[str]:
    """Modules that import the package root (``import greenadapt``, ``from greenadapt import x``)."""
    found = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Import) and any(alias.name == "greenadapt" for alias in node.names)) or (
                    isinstance(node, ast.ImportFrom) and node.module == "greenadapt" and node.level == 0):
                found.append(str(path.relative_to(ROOT)))
    return found


def test_nothing_below_the_api_imports_the_package_root() -> None:
    """The root re-exports the API lazily: a module below the API that imports it loops back up (issue 56, item 4);
    the version a manifest records comes from the leaf greenadapt.version."""
    below = LAYERS[LAYERS.index("api") + 1 :]
    offenders = sorted(f for f in _root_imports() if Path(f).parts[0].removesuffix(".py") in below)
    assert not offenders, offenders


def test_prediction_and_the_runners_read_weights_without_the_adaptation_stages() -> None:
    """inference/ and runners/ import nothing from adaptation/: the weight readers are artifacts' (issue 56, item 4)."""
    edges = sorted(f"{file}" for source, target, file in _imports_between_folders()
                   if source in ("inference", "runners") and target == "adaptation")
    assert not edges, edges


def test_using_a_model_imports_no_training_code() -> None:
    """inference/ imports nothing from training/ (issue 93, item 4): what both use (devices and precision, batches,
    the views' pooling, output health) is compute/'s, below both."""
    edges = sorted(file for source, target, file in _imports_between_folders() if source == "inference" and target == "training")
    assert not edges, edges


# The command-line options not of a command's settings: greenadapt's own (before the command), the output flags every
# command shares, and the builder that makes the rest.
HAND_DECLARED = {"cli/__init__.py", "cli/_common.py", "cli/_build.py"}


def test_every_command_option_is_made_from_its_declaration() -> None:
    """No command module writes a typer option by hand (issue 56, item 1): each comes from its settings class."""
    offenders = []
    for path in sorted((ROOT / "cli").glob("*.py")):
        relative = str(path.relative_to(ROOT))
        if relative in HAND_DECLARED:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("Option", "Argument") and getattr(node.value, "id", "") == "typer":
                offenders.append(f"{relative}:{node.lineno}")
    assert not offenders, offenders


def test_every_api_command_is_built_from_its_settings() -> None:
    """``greenadapt.<command>`` has no hand-written signature: its keywords are its settings class's options."""
    import dataclasses
    import inspect

    from greenadapt import api
    from greenadapt.options import declared_fields

    commands = [name for name in api.FUNCTIONS if name not in ("load", "pipeline")]
    assert len(commands) >= 11, commands
    for name in commands:
        function = getattr(api, name)
        settings_class = function.settings_class
        assert dataclasses.is_dataclass(settings_class) and settings_class.command.replace("-", "_") == name
        keywords = set(inspect.signature(function).parameters) - {"config", "progress", *settings_class.run_options}
        assert keywords == {field.name for field, _ in declared_fields(settings_class)}, name


def _top_level_names(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {target.id for target in targets if isinstance(target, ast.Name)}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    return names


def _names_in_docstrings() -> list[tuple[str, str]]:
    """(file, name) for every ``greenadapt.x.y`` a module's, class's or function's docstring names."""
    found = []
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                found += [(str(path.relative_to(ROOT)), name)
                          for name in re.findall(r"\bgreenadapt(?:\.[A-Za-z_]\w*)+", ast.get_docstring(node) or "")]
    return found


def _resolves(dotted: str) -> bool:
    from greenadapt.api import FUNCTIONS

    parts = dotted.split(".")[1:]
    folder = ROOT
    while parts and (folder / parts[0]).is_dir():
        folder, parts = folder / parts[0], parts[1:]
    if not parts:
        return True
    module = folder / f"{parts[0]}.py"
    if module.is_file():
        return len(parts) == 1 or parts[1] in _top_level_names(module)
    inside = folder / "__init__.py"
    return parts[0] in _top_level_names(inside) or (folder == ROOT and parts[0] in FUNCTIONS)


# Names a docstring may give that are not modules of the package: the recipes' folder is package data (pyproject maps
# the checkout's corpora/ to it).
NOT_MODULES = {"greenadapt.corpora"}


def test_every_module_and_function_a_docstring_names_exists() -> None:
    """A docstring that names ``greenadapt.<module>.<name>`` names something there: a function that moved (multitask's
    ``load_task``) leaves no reader following the old path."""
    stale = sorted({f"{file}: {name}" for file, name in _names_in_docstrings() if name not in NOT_MODULES and not _resolves(name)})
    assert not stale, stale


def test_a_package_docstring_that_lists_its_modules_lists_each_one() -> None:
    """``Modules: ``a`` (...), ``b`` (...)`` in a package's docstring names every module of the package and no other."""
    for init in ROOT.rglob("__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        if "Modules:" not in docstring:
            continue
        listing = docstring.split("Modules:", 1)[1].split("\n\n", 1)[0]
        named = {name for name in re.findall(r"``(\w+)``\s+\(", listing) if not name.startswith("_")}
        present = {path.stem for path in init.parent.glob("*.py") if not path.stem.startswith("_")}
        present |= {path.name for path in init.parent.iterdir() if (path / "__init__.py").is_file()}
        assert named == present, f"{init.relative_to(ROOT)}: lists {sorted(named - present)} that are not there, " \
                                 f"leaves out {sorted(present - named)}"
