"""Kernel-name normalisation: the name under which renamed instantiations of one kernel still
match (another template argument, Inductor's ``triton_poi_fused_add_0`` -> ``triton_poi_fused_add_1``).
Part of the core because the kernels analysis groups kernels across ranks by it (its ``kernel_summary``
table); :mod:`traceview.compare.names` re-exports it for the diff. Rules: :func:`normalize_kernel_name`
and docs/diff_and_check.md."""

from __future__ import annotations

import re

#: suffixes stripped from the end of a name, repeatedly: ``_123`` (Inductor's kernel counter,
#: ``_0``), a Triton signature specialisation (``_0d1d2de``), a hash (8+ hex digits, at least one
#: a digit)
_SUFFIX = re.compile(r"_(?:\d+|(?:\d+[cde]+)+|(?=[0-9a-f]*\d)[0-9a-f]{8,})$")
_RETURN_TYPE = re.compile(r"^(?:void|static|__global__|inline)\s+")
_SPACES = re.compile(r"\s+")
_QUALIFIERS = re.compile(r"\s*(?:const|volatile|noexcept|&&|&)\s*$")


def _operator_end(text: str, i: int) -> int:
    """Where the ``<``/``<<``/``<=`` of an ``operator<...`` starting at ``i`` ends."""
    j = i
    while j < len(text) and text[j] in "<=":
        j += 1
    return j


def _strip_groups(text: str, open_: str, close: str) -> str:
    """Remove balanced ``open_ ... close`` groups (nested). An unbalanced opener is kept as is;
    ``->`` is not a closer, and ``operator<``/``operator<<`` keep their brackets."""
    out: list[str] = []
    depth = 0
    start = 0  # where the current outermost group began in ``text``
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == open_ and open_ == "<" and text.endswith("operator", 0, i):
            # operator< / operator<< / operator<= are names, not template brackets
            j = _operator_end(text, i)
            if depth == 0:
                out.append(text[i:j])
            i = j
            continue
        if ch == open_:
            if depth == 0:
                start = i
            depth += 1
        elif ch == close and depth > 0 and not (close == ">" and i > 0 and text[i - 1] == "-"):
            depth -= 1
        elif depth == 0:
            out.append(ch)
        i += 1
    if depth > 0:  # unbalanced: keep the rest verbatim
        out.append(text[start:])
    return "".join(out)


def _opening_paren(text: str) -> int | None:
    """Index of the ``(`` matching the ``)`` that ends ``text`` (None when unbalanced)."""
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return i
    return None


def _strip_trailing_args(text: str) -> str:
    """Remove trailing balanced ``(...)`` groups (the argument list), with qualifiers after them
    (``const``)."""
    s = text.rstrip()
    while True:
        s2 = _QUALIFIERS.sub("", s)
        if not s2.endswith(")"):
            return s2
        i = _opening_paren(s2)
        if i is None or i == 0:
            return s2  # unbalanced, or the whole name is parenthesised: keep it
        s = s2[:i].rstrip()


def _last_top_level_token(s: str) -> str:
    """``std::enable_if::type at::native::foo`` -> ``at::native::foo`` (spaces inside parentheses,
    as in ``(anonymous namespace)``, do not split)."""
    depth = 0
    cut = -1
    for i, ch in enumerate(s):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == " " and depth == 0:
            cut = i
    return s[cut + 1:] if cut >= 0 else s


def normalize_kernel_name(name: str) -> str:
    """The name under which renamed instantiations of one kernel still match.

    Rules, in order (docs/diff_and_check.md):

    1. template arguments are removed: every balanced ``<...>`` group, nested ones included
       (``void at::native::vectorized_elementwise_kernel<4, ...>(...)`` ->
       ``void at::native::vectorized_elementwise_kernel(...)``);
    2. the argument list is removed: trailing balanced ``(...)`` groups and qualifiers such as
       ``const`` after them;
    3. a leading return type is removed (``void``, ``static``, ``__global__``; and for a C++ name
       containing ``::``, everything before the last top-level space);
    4. whitespace is collapsed;
    5. suffixes are removed from the end, repeatedly, as long as something remains: a numeric
       suffix ``_0``/``_123`` (Inductor's counter: ``triton_poi_fused_add_0`` ->
       ``triton_poi_fused_add``), a Triton signature specialisation (``_0d1d2de``), or a hash-like
       suffix (``_`` + 8 or more hex digits, at least one of them a digit).

    Returns the name unchanged when the rules would leave nothing.
    """
    s = name.strip()
    s = _strip_groups(s, "<", ">")
    s = _strip_trailing_args(s)
    s = _RETURN_TYPE.sub("", s)
    if "::" in s:
        s = _last_top_level_token(s)
    s = _SPACES.sub(" ", s).strip()
    while True:
        m = _SUFFIX.search(s)
        if m is None or m.start() == 0:
            break
        s = s[: m.start()]
    return s or name
