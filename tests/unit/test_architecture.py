"""The layering rules of docs/architecture.md, checked on the source.

1. Layers. The core is the modules ``CORE_LAYERS`` lists, in five layers: the data model, the
   input formats (parsers), loading, analyses, the report (pipeline, report, cache). Everything else in the tree
   is a feature: every other module and subpackage of ``traceview/``, and ``app/``. Imports are
   read from the syntax tree, every import statement anywhere in a module (inside functions, under
   ``if TYPE_CHECKING``) plus ``importlib.import_module``/``__import__`` of a literal name:
   - the core never imports a feature nor a front-end library (Dash, Plotly, rich, typer);
   - a core module never imports a module of a higher layer (the data flows one way:
     input -> Trace -> analyses -> findings -> report);
   - an analysis never imports another analysis (it declares what it ``requires``), and the report
     layer reaches analyses through the registry (``traceview.analyses.specs()``), never by name.
   Finding plugins by a computed name (``importlib.import_module(f"{__name__}.{name}")``, the
   registries' discovery) is no static dependency and is allowed.
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

#: the core, lowest layer first: each name is a module or subpackage of ``traceview`` (``__init__``:
#: the package itself, the public API). A module may import its own layer and the layers below.
#: A new core module is added here (and to docs/architecture.md's "Core modules" table); anything
#: not listed is a feature.
CORE_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("data model", ("errors", "units", "intervals", "claims", "findings", "model", "secrets", "tables", "packed_frames",
                    "environment", "hardware", "registry", "context", "plain", "report_inputs", "parsing",
                    "redaction")),
    ("input formats", ("parsers",)),
    ("loading", ("discovery", "trace_cache", "rank_planning", "progress", "loading")),
    ("analyses", ("analyses",)),
    ("report", ("accounting", "report", "pipeline", "report_cache", "sqlviews", "api", "__init__")),
)
#: front-end libraries the core must not import (a prefix matches the module and its submodules)
FRONT_END_LIBRARIES = ("dash", "plotly", "rich", "typer")
#: report-layer modules that reach the analyses only through the registry. ``sqlviews`` is not one:
#: its views are named analyses' tables (``gaps`` is idle_gaps'), naming them is its job.
THROUGH_THE_REGISTRY = ("traceview.pipeline", "traceview.report", "traceview.accounting", "traceview.report_cache",
                        "traceview.api", "traceview")

#: checks that fail today, per module, with why: issue 26 removes each (strict: the mark goes
#: with the violation, else the test fails)
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {
    ("layers", "traceview.model"): "Trace.sql imports traceview.sqlviews (report layer) inside the method",
}


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


KNOWN_MODULES = {module_name(p) for p in source_files()}
FILE_OF = {module_name(p): p for p in source_files()}


def unit_of(module: str) -> str:
    """The module or subpackage of ``traceview`` a module belongs to: ``traceview.analyses.steps`` ->
    ``analyses``, ``traceview.report`` -> ``report``, ``traceview`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


LAYER_OF = {unit: index for index, (_, units) in enumerate(CORE_LAYERS) for unit in units}
CORE_MODULES = sorted(m for m in KNOWN_MODULES if unit_of(m) in LAYER_OF)
#: derived from the tree: every module and subpackage of traceview (and app) the core does not list
FEATURE_UNITS = sorted({unit_of(m) for m in KNOWN_MODULES} - set(LAYER_OF))


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


def literal_import(node: ast.Call) -> str | None:
    """The module of ``importlib.import_module("x")`` / ``import_module("x")`` / ``__import__("x")``
    with a literal name (a static import in disguise); None for any other call, and for a computed
    name (plugin discovery)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    return first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None


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
        elif isinstance(node, ast.Call) and (dynamic := literal_import(node)) is not None:
            out.append(Import(node.lineno, dynamic, (), ()))
    return out


def imported_modules(path: Path, text: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for each module a file imports: ``from traceview import render`` imports
    ``traceview.render``; ``from traceview.report import Report`` imports ``traceview.report``."""
    out = []
    for imp in imports(path, text):
        submodules = [f"{imp.module}.{n}" for n, _ in imp.names if f"{imp.module}.{n}" in KNOWN_MODULES]
        if submodules:
            out += [(imp.line, m) for m in submodules]
        if len(submodules) < len(imp.names) or not imp.names:
            out.append((imp.line, imp.module))
    return out


def is_project(module: str) -> bool:
    return module == "traceview" or module.startswith("traceview.")


def is_feature(module: str) -> bool:
    if is_project(module):
        return unit_of(module) not in LAYER_OF
    return any(module == lib or module.startswith(lib + ".") for lib in FRONT_END_LIBRARIES)


def is_analysis(module: str) -> bool:
    """A module of traceview.analyses that declares ``SPEC`` (at its top level)."""
    path = FILE_OF.get(module)
    if path is None or unit_of(module) != "analyses" or module == "traceview.analyses":
        return False
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "SPEC" for t in n.targets)
               for n in tree.body)


def checked(rule: str, modules: list[str]) -> list:
    """``modules`` as parameters, the ones known to break ``rule`` marked (strict xfail)."""
    return [pytest.param(m, marks=pytest.mark.xfail(strict=True, reason=f"{m}: {KNOWN_VIOLATIONS[rule, m]}"))
            if (rule, m) in KNOWN_VIOLATIONS else m for m in modules]


def listing(path: Path, found: list[tuple[int, str]]) -> str:
    return "\n".join(f"{path.relative_to(REPO)}:{line} imports {module}" for line, module in found)


# ----------------------------------------------------------------------------- 1. layering


def test_every_listed_core_module_exists():
    """A renamed or removed core module is taken off the list, not silently skipped."""
    units = {unit_of(m) for m in KNOWN_MODULES}
    missing = [unit for unit in LAYER_OF if unit not in units]
    assert not missing, f"CORE_LAYERS lists modules that no longer exist: {missing}"
    stale = [key for key in KNOWN_VIOLATIONS if key[1] not in KNOWN_MODULES]
    assert not stale, f"KNOWN_VIOLATIONS names modules that no longer exist: {stale}"


def test_the_docs_core_table_lists_the_core():
    """docs/architecture.md's "Core modules" table names exactly the modules CORE_LAYERS lists."""
    text = (REPO / "docs" / "architecture.md").read_text()
    table = text.split("## Core modules", 1)[1].split("\n## ", 1)[0]
    documented = set()
    for cell in re.findall(r"^\| `([\w/.]+)`", table, re.MULTILINE):
        name = cell.rstrip("/").removesuffix(".py").split("/")[-1]
        documented.add(name)
    assert documented == set(LAYER_OF), (f"only in the docs: {sorted(documented - set(LAYER_OF))}; "
                                         f"only in CORE_LAYERS: {sorted(set(LAYER_OF) - documented)}")


def test_the_features_are_derived_from_the_tree():
    """Not vacuous: the feature packages docs/architecture.md names are features here."""
    for unit in ("render", "app", "jobs", "compare", "commands", "cli", "history", "redact", "figures",
                 "export_perfetto"):
        assert unit in FEATURE_UNITS, unit
    assert not is_feature("traceview.analyses.steps") and not is_feature("traceview")
    assert is_feature("traceview.render.html") and is_feature("plotly.graph_objects")


@pytest.mark.parametrize("module", CORE_MODULES)
def test_the_core_never_imports_a_feature(module):
    path = FILE_OF[module]
    found = [(line, target) for line, target in imported_modules(path) if is_feature(target)]
    assert not found, ("the core imports features (a new core module goes into CORE_LAYERS):\n"
                       + listing(path, found))


@pytest.mark.parametrize("module", checked("layers", CORE_MODULES))
def test_the_core_imports_no_higher_layer(module):
    path = FILE_OF[module]
    mine = LAYER_OF[unit_of(module)]
    found = [(line, target) for line, target in imported_modules(path)
             if is_project(target) and LAYER_OF.get(unit_of(target), -1) > mine]
    assert not found, (f"{module} is in the {CORE_LAYERS[mine][0]} layer; it imports higher layers:\n"
                       + listing(path, found))


ANALYSIS_MODULES = sorted(m for m in CORE_MODULES if is_analysis(m))


@pytest.mark.parametrize("module", checked("analysis", ANALYSIS_MODULES))
def test_an_analysis_imports_no_other_analysis(module):
    """An analysis gets another's result from the pipeline (it declares what it ``requires``);
    shared context modules without a SPEC (steps, classify) are fine."""
    path = FILE_OF[module]
    found = [(line, target) for line, target in imported_modules(path) if target != module and is_analysis(target)]
    assert not found, "an analysis imports other analyses:\n" + listing(path, found)


@pytest.mark.parametrize("module", checked("registry", list(THROUGH_THE_REGISTRY)))
def test_the_report_layer_reaches_analyses_through_the_registry(module):
    path = FILE_OF[module]
    found = [(line, target) for line, target in imported_modules(path)
             if unit_of(target) == "analyses" and target != "traceview.analyses"]
    assert not found, "names analysis modules (use the specs' hooks):\n" + listing(path, found)


def test_the_layering_checks_see_every_import():
    """The checks above are not vacuous: they find features imported inside a function, relative or
    not, under TYPE_CHECKING, or through a literal ``import_module``; plugin discovery by a computed
    name is not an import."""
    text = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from traceview.jobs import driver\n"
            "def f():\n    from traceview.render import terminal\n    import plotly.graph_objects\n"
            "    from ..render import html\n    from . import intervals\n    from traceview import app\n"
            "    importlib.import_module('traceview.compare')\n"
            "    importlib.import_module(f'traceview.analyses.{name}')\n"
            "    from traceview import loading, figures\n")
    found = imported_modules(REPO / "analyses" / "steps.py", text)
    assert sorted(m for _, m in found if is_feature(m)) == [
        "plotly.graph_objects", "traceview.app", "traceview.compare", "traceview.figures", "traceview.jobs.driver",
        "traceview.render.html", "traceview.render.terminal"]
    # ``from . import intervals``: no module traceview.analyses.intervals, so a name of the package
    assert {"traceview.loading", "traceview.analyses"} <= {m for _, m in found}
    # a static feature import inside a core function is found in a real core module's text
    pipeline = FILE_OF["traceview.pipeline"]
    text = pipeline.read_text() + "\n\ndef extra():\n    from traceview.app import server\n"
    assert [m for _, m in imported_modules(pipeline, text) if is_feature(m)] == ["traceview.app.server"]


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
