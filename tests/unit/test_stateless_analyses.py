"""Analyses are pure and stateless (issue 26; the developers' guide): no module of ``analyses/`` keeps
state between calls. Checked on the source (AST), module by module:

- no ``global`` statement;
- no module-level name bound to a mutable container (a dict, list or set display or comprehension;
  a ``dict()``, ``list()``, ``set()``, ``defaultdict()``, ``OrderedDict()``, ``Counter()`` or
  ``deque()`` call) that code of the module mutates after import: a subscript assigned, augmented
  or deleted, the name augmented, or a mutating method called on it (``append``, ``add``,
  ``update``, ``setdefault``, ``pop``, ``clear``, ``extend``, ...) in a function or method.
  Statements at the top level (and class bodies) run once, at import, under the import lock: a
  table they finish building is a constant; the same statement in a function runs while the
  analyses do, and is state;
- no memo decorator (``functools.lru_cache``, ``functools.cache``): its cache is module-level state.

Shared derived data belongs in the :class:`~traceview.context.AnalysisContext` of the analysis run
(``traceview.registry.register_input``). The checker itself is tested on small sources first, so a
pass below means something."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import REPO

ANALYSES = REPO / "analyses"
MODULES = sorted(p.name for p in ANALYSES.glob("*.py"))

MUTABLE_CALLS = {"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque"}
MUTATING_METHODS = {"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "insert",
                    "remove", "discard", "appendleft", "extendleft", "sort", "reverse"}
MEMO_DECORATORS = {"lru_cache", "cache"}


def _callee(node: ast.expr) -> str | None:
    """The last name of a call's function (``functools.lru_cache`` -> ``lru_cache``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _is_mutable(value: ast.expr | None) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    return isinstance(value, ast.Call) and _callee(value.func) in MUTABLE_CALLS


def _names(target: ast.expr) -> list[str]:
    if isinstance(target, ast.Name):
        return [target.id]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [n for t in target.elts for n in _names(t)]
    return []


def _module_containers(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound to a mutable container (in the module body, also under a top-level
    ``if``/``try``/``with``), with the line."""
    out: dict[str, int] = {}
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        stmt = todo.pop(0)
        if isinstance(stmt, ast.Assign) and _is_mutable(stmt.value):
            for target in stmt.targets:
                out.update((n, stmt.lineno) for n in _names(target))
        elif isinstance(stmt, ast.AnnAssign) and _is_mutable(stmt.value):
            out.update((n, stmt.lineno) for n in _names(stmt.target))
        elif isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                for child in getattr(stmt, field, []):
                    todo.extend(child.body if isinstance(child, ast.ExceptHandler) else [child])
    return out


def _base_name(node: ast.expr) -> str | None:
    """``NAME`` of ``NAME``, ``NAME[...]``, ``NAME[...][...]``, ``NAME.attr[...]``."""
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _mutations(node: ast.AST) -> list[tuple[str, str]]:
    """(name, how) for each mutation of a name's container that ``node`` is."""
    found: list[tuple[str, str]] = []
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target]):
                if isinstance(t, ast.Subscript) and (name := _base_name(t)):
                    found.append((name, "subscript assignment"))
                elif isinstance(node, ast.AugAssign) and isinstance(t, ast.Name):
                    found.append((t.id, "augmented assignment"))
    elif isinstance(node, ast.Delete):
        found += [(n, "del of a subscript") for t in node.targets
                  if isinstance(t, ast.Subscript) and (n := _base_name(t))]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATING_METHODS:
        if name := _base_name(node.func.value):
            found.append((name, f".{node.func.attr}()"))
    return found


def _bound_names(fn: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a function binds itself (parameters, assignments; not those it declares global):
    they shadow a module-level name of the same spelling."""
    a = fn.args
    names = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    names |= {x.arg for x in (a.vararg, a.kwarg) if x is not None}
    declared: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Global):
            declared.update(node.names)
    return names - declared


class _RuntimeMutations(ast.NodeVisitor):
    """Mutations of module-level containers in code that runs after import: function bodies. (The
    module's top-level statements, class bodies, decorators and default values run at import.)"""

    def __init__(self, containers: dict[str, int]) -> None:
        self.containers = containers
        self.scopes: list[set[str]] = []
        self.found: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for deco in node.decorator_list:
            self.visit(deco)
        self.visit(node.args)
        self.scopes.append(_bound_names(node))
        for stmt in node.body:
            self.visit(stmt)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.visit(node.args)
        self.scopes.append(_bound_names(node))
        self.visit(node.body)
        self.scopes.pop()

    def generic_visit(self, node: ast.AST) -> None:
        if self.scopes:
            for name, how in _mutations(node):
                if name in self.containers and not any(name in scope for scope in self.scopes):
                    self.found.append(f"line {getattr(node, 'lineno', 0)}: {how} of module-level {name} "
                                      f"(line {self.containers[name]})")
        super().generic_visit(node)


def problems(source: str) -> list[str]:
    """What makes ``source`` (a module) stateful, one line each (empty: none)."""
    tree = ast.parse(source)
    out: list[str] = []
    decorators = {id(d) for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  for d in node.decorator_list}
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            out.append(f"line {node.lineno}: global {', '.join(node.names)}")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                name = _callee(deco.func if isinstance(deco, ast.Call) else deco)
                if name in MEMO_DECORATORS:
                    out.append(f"line {deco.lineno}: @{name} on {node.name} (a module-level memo)")
        elif isinstance(node, ast.Call) and _callee(node.func) in MEMO_DECORATORS and id(node) not in decorators:
            out.append(f"line {node.lineno}: {_callee(node.func)}(...) (a module-level memo)")
    visitor = _RuntimeMutations(_module_containers(tree))
    visitor.visit(tree)
    out += visitor.found
    return sorted(set(out), key=lambda line: int(line.split(":")[0].split()[1]))


# ------------------------------------------------------------------------------------ the checker


@pytest.mark.parametrize("source, expected", [
    ("_CACHE = {}\ndef f(k):\n    _CACHE[k] = 1\n", "subscript assignment of module-level _CACHE"),
    ("_SEEN = set()\ndef f(k):\n    _SEEN.add(k)\n", ".add() of module-level _SEEN"),
    ("from collections import defaultdict\nBY = defaultdict(list)\ndef f(k, v):\n    BY[k].append(v)\n",
     ".append() of module-level BY"),
    ("MEMO: dict[str, int] = dict()\ndef f(k):\n    return MEMO.setdefault(k, 0)\n", ".setdefault() of module-level"),
    ("LOG = []\nclass A:\n    def m(self):\n        LOG.extend([1])\n", ".extend() of module-level LOG"),
    ("HITS = {'a': 0}\ndef f():\n    HITS['a'] += 1\n", "subscript assignment of module-level HITS"),
    ("Q = [1]\ndef f():\n    del Q[0]\n", "del of a subscript of module-level Q"),
    ("T = {}\ndef f():\n    T.clear()\n", ".clear() of module-level T"),
    ("T = {}\ndef f():\n    return T.pop('x', None)\n", ".pop() of module-level T"),
    ("n = 0\ndef f():\n    global n\n    n += 1\n", "global n"),
    ("import functools\n@functools.lru_cache(maxsize=8)\ndef f(x):\n    return x\n", "@lru_cache on f"),
    ("from functools import cache\n@cache\ndef f(x):\n    return x\n", "@cache on f"),
    ("import functools\ndef g(x):\n    return x\nf = functools.lru_cache(g)\n", "lru_cache(...)"),
])
def test_the_checker_finds_module_state(source: str, expected: str) -> None:
    found = problems(source)
    assert any(expected in line for line in found), found


@pytest.mark.parametrize("source", [
    "TABLE = {'a': 1}\ndef f(k):\n    return TABLE.get(k)\n",  # read only
    "ADVICE = {'a': 'x'}\nADVICE['b'] = ADVICE['a']\n",  # finished at import: a constant
    "NAMES = [1, 2]\ndef f():\n    NAMES = []\n    NAMES.append(3)\n    return NAMES\n",  # a local of the same name
    "def f(out):\n    out['k'] = 1\n    seen = set()\n    seen.add(1)\n",  # locals and arguments
    "RULES = (1, 2)\ndef f():\n    return sorted(RULES)\n",  # a tuple: immutable
])
def test_the_checker_leaves_constants_and_locals_alone(source: str) -> None:
    assert problems(source) == []


# ------------------------------------------------------------------------------------ analyses/


def test_every_analysis_module_is_checked() -> None:
    assert {"steps.py", "classify.py", "efficiency.py", "communication.py", "comm_rules.py"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_analysis_module_keeps_no_state(module: str) -> None:
    source = Path(ANALYSES / module).read_text()
    assert problems(source) == [], module
