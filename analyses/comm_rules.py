"""Which kernels are communication: one table of rules (docs/metrics.md, "Common definitions").

A kernel is communication when a rule of the table matches it; the first rule that matches names
its ``rule`` and ``family`` (the library that issued it), which the communication analysis reports
(``rules`` table: how much time each rule classified). A rule is either a name rule (a regex searched
in the kernel name) or an argument rule (a column of the event that must be present, e.g. the
``collective`` args PyTorch writes for collectives).

Built-in rules, in order: :data:`BUILTIN_RULES` (``msccl``, ``nccl``, ``deepep``, ``nvshmem``,
``symmetric_memory``, ``custom_allreduce``, ``all_to_all``, ``send_recv``, ``xla_collective``,
``collective_args``), each with its regex and, in ``matches``, what it matches in words.
docs/metrics.md ("Common definitions") holds the table as :func:`rules_markdown` writes it
(``tests/unit/test_comm_rules.py`` compares them), so the documentation says exactly what the
patterns match.

User rules (``--comm-pattern [FAMILY=]REGEX``, a ``--comm-config`` TOML file; ``Options.comm_patterns``)
come first, so they can add kernels the table misses and relabel the family of ones it knows.
Rules only ever add communication: a kernel no rule matches is compute.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceview.errors import TraceviewError

#: the family of a ``--comm-pattern`` given without ``FAMILY=``
USER_FAMILY = "user"
_FAMILY = re.compile(r"[A-Za-z_][\w.-]{0,63}")
#: the words of the collective a kernel name speaks of (generic kinds, for families other than nccl)
_COLLECTIVE_WORD = re.compile(
    r"(?i)(all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast|send_?recv|barrier)")


@dataclass(frozen=True)
class CommRule:
    """One row of the table. ``pattern``: a regex searched in the kernel name; ``arg``: else, a
    column that must be non-null. ``kind``: the collective kind of every kernel it matches (None:
    from ``op`` or the collective words of the name); ``op``: a regex whose first group names the
    operation (DeepEP's ``dispatch``, ``combine``, ...)."""

    name: str
    family: str
    pattern: str | None = None
    arg: str | None = None
    kind: str | None = None
    op: str | None = None
    source: str = "built-in"
    #: what the rule matches, in words (the documentation's table; built-in rules)
    matches: str = ""
    #: ``pattern`` and ``op`` compiled once, as the rule is made
    regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    op_regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", re.compile(self.pattern) if self.pattern is not None else None)
        object.__setattr__(self, "op_regex", re.compile(self.op) if self.op is not None else None)

    def matches_name(self, name: str) -> bool:
        return self.regex is not None and self.regex.search(name) is not None

    def operation(self, name: str) -> str | None:
        """What the kernel does, from its name: ``kind``, the ``op`` group, else a collective word
        (``multimem_all_reduce_kernel`` -> ``all_reduce``); None when the name says nothing."""
        if self.kind is not None:
            return self.kind
        if self.op_regex is not None:
            match = self.op_regex.search(name)
            if match:
                return match.group(1)
        match = _COLLECTIVE_WORD.search(name)
        return match.group(1) if match else None


BUILTIN_RULES: tuple[CommRule, ...] = (
    # before nccl: MSCCL kernels take NCCL types (`mscclKernel_Sum_half_Simple_false(ncclDevComm*, ...)`)
    CommRule("msccl", "msccl", pattern=r"(?<![A-Za-z])msccl",
             matches="`msccl` (lower case) not preceded by a letter: MSCCL `mscclKernel_*` (its arguments "
             "name NCCL types, so it comes first) and MSCCL++ `mscclpp::...`"),
    CommRule("nccl", "nccl", pattern=r"(?i)nccl|rccl",
             matches="`nccl` or `rccl` anywhere in the name, any case (`ncclKernel_*`, `ncclDevKernel_*`; "
             "RCCL keeps NCCL's names)"),
    # namespaces anchored on both sides: `cdpsk::ep::` (CUB scan kernels) and
    # `dpsk::ep::cuda::get_dispatch_layout` (a local layout computation) are compute
    CommRule("deepep", "deepep", pattern=r"(?<![\w:])(?:deep_ep|dpsk::ep)::(?:intra|inter)node\w*::\w",
             op=r"::(?:intra|inter)node\w*::(\w+)",
             matches="`deep_ep::` or `dpsk::ep::` (not preceded by a word character or `:`), then any "
             "namespace whose name starts with `intranode` or `internode` (DeepEP's `intranode`, `internode`, "
             "`internode_ll`, or any other such as `internode_foo`), then `::` and a name (`dispatch`, "
             "`combine`, `notify_dispatch`, `cached_notify`, `clean_low_latency_buffer`, ...). "
             "`cdpsk::ep::CUB_*` scan kernels and `dpsk::ep::cuda::get_dispatch_layout` stay compute"),
    CommRule("nvshmem", "nvshmem", pattern=r"(?i)nvshmem",
             matches="`nvshmem` anywhere in the name, any case (NVSHMEM's own kernels, `nvshmemi_*`)"),
    CommRule("symmetric_memory", "symmetric_memory",
             pattern=r"(?<![A-Za-z0-9])(?:multimem_(?:one_shot_)?all_reduce|multimem_all_gather"
             r"|one_shot_all_reduce|two_shot_all_reduce)_kernel",
             matches="PyTorch symmetric memory: `multimem_all_reduce_kernel`, "
             "`multimem_one_shot_all_reduce_kernel`, `multimem_all_gather_kernel`, `one_shot_all_reduce_kernel` "
             "or `two_shot_all_reduce_kernel` (lower case) not preceded by a letter or digit, as a prefix: "
             "anything may follow (`two_shot_all_reduce_kernel_inplace`, a template's `<...>`), and `_` may "
             "precede (`my_one_shot_all_reduce_kernel`)"),
    CommRule("custom_allreduce", "custom_allreduce",
             pattern=r"cross_device_reduce_[12]stage|(?<![A-Za-z])(?:[Oo]ne|[Tt]wo)ShotAllReduceKernel"
             r"|allreduce_fusion_kernel_", kind="all_reduce",
             matches="vLLM/SGLang `cross_device_reduce_1stage`/`2stage` anywhere; TensorRT-LLM "
             "`oneShotAllReduceKernel`/`twoShotAllReduceKernel` (first letter either case) not preceded by a "
             "letter; TensorRT-LLM/FlashInfer `allreduce_fusion_kernel_` anywhere (lamport and sync variants)"),
    CommRule("all_to_all", "all_to_all", pattern=r"(?<![A-Za-z])[Aa]ll_?[Tt]o_?[Aa]ll(?:v|_?single)?(?![a-z])",
             kind="all_to_all",
             matches="`all`, `to`, `all` (each first letter either case, each `_` optional: `all_to_all`, "
             "`alltoall`, `AllToAll`), optionally then `v`, `single` or `_single`, not preceded by a letter "
             "and not followed by a lower-case letter (`intranode_alltoall_kernel`, `AllToAllKernel`)"),
    CommRule("send_recv", "send_recv",
             pattern=r"(?<![A-Za-z])(?:[Ss]end_?[Rr]ecv|[Pp]2[Pp]_?(?:[Ss]end|[Rr]ecv))(?![a-z])",
             matches="`send` `recv` (`SendRecv`, `send_recv`, `sendrecv`, `Send_Recv`), or `p2p`/`P2P` then "
             "`send` or `recv` (`p2p_send`, `p2p_recv`, `P2P_Recv`, `p2pSend`; each first letter either case, "
             "`_` optional), not preceded by a letter and not followed by a lower-case letter "
             "(`SendRecvKernel` matches, `sendrecvs` does not)"),
    # XLA's collective HLO ops as the XSpace of a TPU or GPU run names them (`all-reduce.3`,
    # `all-gather-start`, `collective-permute-done.1`): the opcode, an async -start/-done half, a
    # `.N` suffix; fusions that merely contain one (`all-reduce-fusion`, `fusion.all-reduce`) stay compute
    CommRule("xla_collective", "xla",
             pattern=r"^%?(?:all-reduce|all-gather|reduce-scatter|collective-permute|collective-broadcast"
             r"|ragged-all-to-all|all-to-all)(?:-start|-done)?(?:\.\d+)*$",
             op=r"^%?([a-z-]+?)(?:-start|-done)?(?:\.\d+)*$",
             matches="an XLA collective HLO op, the whole name (an optional `%`): `all-reduce`, `all-gather`, "
             "`reduce-scatter`, `collective-permute`, `collective-broadcast`, `all-to-all`, "
             "`ragged-all-to-all`, each alone or as its async `-start`/`-done` half, with `.N` suffixes "
             "(`all-reduce.3`, `all-gather-start`); fusions containing one (`all-reduce-fusion`) stay compute"),
    CommRule("collective_args", "collective_args", arg="collective",
             matches="no name rule matched and the event carries collective args (non-null `collective` column)"),
)


def rules_markdown() -> str:
    """:data:`BUILTIN_RULES` as the Markdown table of docs/metrics.md ("Common definitions")."""
    lines = ["| rule | family | regex (searched in the kernel name) | a kernel matches when |",
             "| --- | --- | --- | --- |"]
    for rule in BUILTIN_RULES:
        regex = "`" + rule.pattern.replace("|", "\\|") + "`" if rule.pattern is not None else f"(arg `{rule.arg}`)"
        lines.append(f"| `{rule.name}` | {rule.family} | {regex} | {rule.matches} |")
    return "\n".join(lines)


def parse_pattern(spec: str, *, source: str = "--comm-pattern") -> CommRule:
    """``REGEX`` or ``FAMILY=REGEX`` -> a user rule (family ``user`` without one).

    The text before the first ``=`` is a family only when it looks like one (a name of letters,
    digits, ``_``, ``.``, ``-``); write ``user=a=b`` for a regex that itself starts with ``name=``.
    Raises :class:`TraceviewError` (one line) for a bad regex or one that matches every name."""
    family, regex = USER_FAMILY, spec
    head, sep, tail = spec.partition("=")
    if sep and _FAMILY.fullmatch(head):
        family, regex = head, tail
    if not regex:
        raise TraceviewError(f"{source} {spec!r}: the regex is empty")
    try:
        pattern = re.compile(regex)
    except re.error as exc:
        raise TraceviewError(f"{source} {spec!r}: not a regular expression ({exc})") from None
    if pattern.search("") is not None:
        # it would match every kernel name: every kernel would become communication
        raise TraceviewError(f"{source} {spec!r}: the regex matches the empty string (so every kernel name)")
    return CommRule(name=f"user:{regex}", family=family, pattern=regex, source=source)


def rule_table(patterns: tuple[str, ...] = ()) -> tuple[CommRule, ...]:
    """The rules in the order they are tried: the user's (``Options.comm_patterns``), then the
    built-in ones."""
    return tuple(parse_pattern(p) for p in patterns) + BUILTIN_RULES


def load_config(path: str | Path) -> tuple[str, ...]:
    """The user rules of a TOML file, as ``FAMILY=REGEX`` strings (what ``Options.comm_patterns``
    holds). Accepted, at the top level or under ``[tool.traceview]`` (so a ``pyproject.toml`` works)::

        comm_patterns = ["mylib=my_allreduce_kernel", "other_kernel"]

        [[comm_rules]]
        family = "mylib"
        pattern = "my_alltoall_\\\\w+"

    Raises :class:`TraceviewError` (one line) for a missing or malformed file or a bad rule."""
    where = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise TraceviewError(f"--comm-config {where}: cannot read it ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TraceviewError(f"--comm-config {where}: not a TOML file ({exc})") from None
    section: Any = data.get("tool", {}).get("traceview", data) if isinstance(data.get("tool"), dict) else data
    specs = [*_string_list(section.get("comm_patterns", []), where),
             *_rule_tables(section.get("comm_rules", []), where)]
    if not specs:
        raise TraceviewError(f"--comm-config {where}: no comm_patterns or [[comm_rules]] in it")
    for spec in specs:
        parse_pattern(spec, source=f"--comm-config {where}:")
    return tuple(specs)


def _string_list(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TraceviewError(f"--comm-config {where}: comm_patterns must be a list of strings")
    return list(value)


def _rule_tables(value: Any, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise TraceviewError(f"--comm-config {where}: comm_rules must be [[comm_rules]] tables")
    out = []
    for i, rule in enumerate(value, 1):
        pattern, family = rule.get("pattern"), rule.get("family", USER_FAMILY)
        if not isinstance(pattern, str) or not isinstance(family, str) or not _FAMILY.fullmatch(family):
            raise TraceviewError(f"--comm-config {where}: comm_rules #{i} needs a string pattern and a family "
                                 "name (letters, digits, _ . -)")
        out.append(f"{family}={pattern}")
    return out


__all__ = ["BUILTIN_RULES", "USER_FAMILY", "CommRule", "load_config", "parse_pattern", "rule_table", "rules_markdown"]
