"""The layering rules of docs/architecture.md, checked on the source.

1. The core never imports a feature (nor a front-end library), not even inside a function.
2. No module uses another module's private name (``from X import _name``, ``module._name``).
3. Adding an analysis is one module: every analysis module declares its ``SPEC``, every declared
   table has a title, and the streams analysis reaches the report without any other source file
   naming it.

Source files are mapped to the modules they install as (pyproject.toml ``package-dir``):
``parsers/`` is ``traceview.parsers``, ``analyses/`` is ``traceview.analyses``, ``app/`` is
``traceview.app``.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, SAMPLE_TRACES

#: source folder -> the package it installs as
PACKAGE_DIRS = {"traceview": "traceview", "parsers": "traceview.parsers", "analyses": "traceview.analyses",
                "app": "traceview.app"}
CORE_MODULES = [f"traceview/{m}.py" for m in ("__init__", "model", "loading", "errors", "findings", "registry",
                                              "pipeline", "report", "tables", "units", "secrets", "intervals",
                                              "environment", "claims", "accounting", "report_cache", "sqlviews")]
#: modules and libraries the core must not import (a prefix matches the module and its submodules)
FEATURES = ("traceview.render", "traceview.app", "traceview.jobs", "traceview.compare", "traceview.commands",
            "traceview.cli", "traceview.redact", "traceview.figures", "traceview.scale", "traceview.diff",
            "traceview.check", "dash", "plotly", "rich", "typer")


def module_name(path: Path) -> str:
    """``analyses/steps.py`` -> ``traceview.analyses.steps``; a package's ``__init__`` -> the package."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    parts[0] = PACKAGE_DIRS[parts[0]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def source_files() -> list[Path]:
    return sorted(p for folder in PACKAGE_DIRS for p in (REPO / folder).rglob("*.py"))


def core_files() -> list[Path]:
    files = [REPO / m for m in CORE_MODULES]
    files += sorted((REPO / "analyses").glob("*.py")) + sorted((REPO / "parsers").glob("*.py"))
    return [f for f in files if f.exists()]


KNOWN_MODULES = {module_name(p) for p in source_files()}


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@dataclass(frozen=True)
class Import:
    line: int
    module: str  # the absolute module imported from (``from X import ...``) or imported
    names: tuple[tuple[str, int], ...]  # (name, line) of each name imported from it (none for ``import X``)
    aliases: tuple[tuple[str, str], ...]  # (bound name, what it refers to: a dotted name)


def resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    """The absolute module of a (possibly relative) ``from ... import`` in ``module``."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imports(path: Path, text: str | None = None) -> list[Import]:
    """Every import of a file (or of ``text`` as if it were that file), at any depth: inside
    functions and under ``if TYPE_CHECKING`` too."""
    module = module_name(path)
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text() if text is None else text, filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                bound = a.asname or a.name.split(".")[0]
                target = a.name if a.asname else a.name.split(".")[0]
                out.append(Import(node.lineno, a.name, (), ((bound, target),)))
        elif isinstance(node, ast.ImportFrom):
            source = resolve(module, is_package, node)
            names = tuple((a.name, getattr(a, "lineno", node.lineno)) for a in node.names)
            aliases = tuple((a.asname or a.name, f"{source}.{a.name}") for a in node.names)
            out.append(Import(node.lineno, source, names, aliases))
    return out


def is_feature(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FEATURES)


# ----------------------------------------------------------------------------- 1. layering


def test_core_never_imports_a_feature():
    offenders = []
    for path in core_files():
        for imp in imports(path):
            # ``from traceview import render`` imports the feature too
            targets = [imp.module] + [f"{imp.module}.{n}" for n, _ in imp.names]
            for target in targets:
                if is_feature(target):
                    offenders.append(f"{path.relative_to(REPO)}:{imp.line} imports {target}")
                    break
    assert not offenders, "the core imports features:\n" + "\n".join(offenders)


def test_the_layering_check_sees_imports_inside_functions():
    """The check above is not vacuous: it finds features imported inside a function, relative or not."""
    text = ("def f():\n    from traceview.render import terminal\n    import plotly.graph_objects\n"
            "    from ..render import html\n    from . import intervals\n")
    found = [i.module for i in imports(REPO / "analyses" / "steps.py", text)]
    assert [m for m in found if is_feature(m)] == ["traceview.render", "plotly.graph_objects", "traceview.render"]


# ----------------------------------------------------------------------------- 2. private names


def is_module(name: str) -> bool:
    return name in KNOWN_MODULES


def private_uses(path: Path, text: str | None = None) -> list[tuple[str, int, str]]:
    """(file, line, name) for each private name of another module that ``path`` uses:
    ``from X import _name``, ``alias._name`` where ``alias`` is a project module, and importing from
    a private module (``X._m``) outside the package that holds it. A module's own private names and
    a package's own private submodules (``traceview.commands._common`` in ``traceview.commands``)
    are fine."""
    module = module_name(path)
    rel = str(path.relative_to(REPO))
    found: list[tuple[str, int, str]] = []
    bound: dict[str, str] = {}
    source = path.read_text() if text is None else text
    for imp in imports(path, source):
        for name, target in imp.aliases:
            if is_module(target) or target == "traceview":
                bound[name] = target
        if imp.module == module:
            continue
        hidden = private_module_owner(imp.module)
        if hidden is not None and not module.startswith(hidden + "."):
            found.append((rel, imp.line, imp.module))
        for name, line in imp.names:
            own_submodule = module.startswith(imp.module + ".") and is_module(f"{imp.module}.{name}")
            if is_private(name) and not own_submodule:
                found.append((rel, line, f"{imp.module}.{name}"))
    for node in ast.walk(ast.parse(source, filename=str(path))):
        if isinstance(node, ast.Attribute) and is_private(node.attr):
            owner = dotted(node.value, bound)
            if owner is not None and owner != module and (is_module(owner) or owner == "traceview"):
                found.append((rel, node.lineno, f"{owner}.{node.attr}"))
    return found


def private_module_owner(module: str) -> str | None:
    """The package holding the first private component of a dotted module name (None: all public)."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if is_private(part):
            return ".".join(parts[:i])
    return None


def dotted(node: ast.expr, bound: dict[str, str]) -> str | None:
    """The project module an expression names (``iv`` -> ``traceview.intervals``,
    ``traceview.render.terminal`` -> itself), or None."""
    if isinstance(node, ast.Name):
        return bound.get(node.id)
    if isinstance(node, ast.Attribute):
        base = dotted(node.value, bound)
        if base is not None and is_module(f"{base}.{node.attr}"):
            return f"{base}.{node.attr}"
    return None


def test_no_module_uses_another_modules_private_names():
    offenders = [use for path in source_files() for use in private_uses(path)]
    listing = "\n".join(f"{file}:{line}: {name}" for file, line, name in offenders)
    assert not offenders, f"{len(offenders)} uses of another module's private name:\n{listing}"


def test_the_private_name_check_finds_every_form():
    text = ("from traceview.report import _is_missing\nfrom traceview import intervals as iv\n"
            "import traceview.pipeline\nx = iv._arr\ny = traceview.pipeline._spec\nz = iv.__doc__\n"
            "from .components import (\n    render,\n    _helper,\n)\nfrom traceview.commands._common import f\n")
    uses = sorted((name, line) for _, line, name in private_uses(REPO / "app" / "views.py", text))
    assert uses == [("traceview.app.components._helper", 9), ("traceview.commands._common", 11),
                    ("traceview.intervals._arr", 4), ("traceview.pipeline._spec", 5),
                    ("traceview.report._is_missing", 1)]
    # its own package's private module, its own private names
    assert private_uses(REPO / "traceview" / "commands" / "info.py", "from . import _common\n") == []
    assert private_uses(REPO / "analyses" / "steps.py", "from .steps import _x\nfrom . import _y\n") == [
        ("analyses/steps.py", 2, "traceview.analyses._y")]


# ----------------------------------------------------------------------------- 3. one module per analysis


def test_every_analysis_module_declares_its_spec():
    from traceview.analyses import specs
    from traceview.registry import AnalysisSpec

    import importlib

    registered = {s.run.__module__ for s in specs()}
    for path in sorted((REPO / "analyses").glob("*.py")):
        tree = ast.parse(path.read_text())
        functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        if "analyze" not in functions:
            continue
        mod = importlib.import_module(module_name(path))
        assert isinstance(getattr(mod, "SPEC", None), AnalysisSpec), f"{path.name} has analyze() but no SPEC"
        assert mod.__name__ in registered, f"{path.name}: its SPEC is not registered"
    for spec in specs():
        assert spec.title, f"analysis {spec.name} has no title"
        for table in spec.tables:
            assert table.title.strip(), f"table {spec.name}.{table.name} has no title"


NEW_ANALYSIS = "streams"


def test_the_new_analysis_is_named_by_no_other_source_file():
    """analyses/streams.py was added without touching any other module: outside it (and docs, tests)
    no source names the analysis, its module or its finding."""
    patterns = [re.compile(p) for p in (rf"""["']{NEW_ANALYSIS}["']""", rf"analyses\.{NEW_ANALYSIS}\b",
                                        rf"\bimport {NEW_ANALYSIS}\b", r"communication_on_compute_stream")]
    mine = REPO / "analyses" / f"{NEW_ANALYSIS}.py"
    hits = []
    for path in source_files() + [REPO / "pyproject.toml"]:
        if path == mine or not path.exists():
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if any(p.search(line) for p in patterns):
                hits.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    assert not hits, "other sources name the new analysis:\n" + "\n".join(hits)


def test_the_new_analysis_reaches_the_report():
    from traceview.analyses import specs
    from traceview.pipeline import analyze

    spec = next(s for s in specs() if s.name == NEW_ANALYSIS)
    report = analyze(SAMPLE_TRACES / "synthetic_4rank")
    section = report["analyses"][NEW_ANALYSIS]
    assert section["title"] == spec.title
    for table in spec.tables:
        assert section["tables"][table.name]["title"] == table.title
        assert section["tables"][table.name]["rows"], f"{table.name} is empty on the 4-rank sample"


@pytest.mark.parametrize("name", ["markdown"])
def test_the_new_analysis_is_rendered(name):
    """A renderer shows every analysis of the report with its title, the new one included."""
    from traceview.analyses import specs
    from traceview.pipeline import analyze
    from traceview.registry import RENDERERS

    import traceview.render  # noqa: F401  (registers the renderers)

    spec = next(s for s in specs() if s.name == NEW_ANALYSIS)
    text = RENDERERS[name]().render(analyze(SAMPLE_TRACES / "synthetic_4rank"))
    assert isinstance(text, str) and spec.title in text
    for table in spec.tables:
        assert table.title in text
