"""What telling an Nsight Compute export apart needs, without pandas: every format is sniffed in
every process that reads a trace (a Kineto parse's workers too), so this module stays light."""

from __future__ import annotations

HINT = "export one with: ncu --import REPORT.ncu-rep --csv --page details > REPORT.csv"


def split_preamble(text: str) -> tuple[str, int]:
    """(the CSV from its header on, lines skipped before it: ncu's ``==PROF==`` messages)."""
    skipped = 0
    pos = 0
    while text.startswith("==", pos) or text.startswith("\n", pos) or text.startswith("\r\n", pos):
        end = text.find("\n", pos)
        if end < 0:
            return "", skipped + 1
        pos = end + 1
        skipped += 1
    return text[pos:], skipped


def looks_like_ncu_csv(head: bytes) -> bool:
    """True when a file's first bytes are an ncu CSV header (after ncu's ``==`` messages)."""
    text, _ = split_preamble(head.decode("utf-8", errors="replace").lstrip("\ufeff"))
    first = text.split("\n", 1)[0]
    return first.startswith('"ID","') and '"Kernel Name"' in first


def looks_like_json(head: bytes) -> bool:
    """A gzip or JSON object start: a Kineto trace that may hold CUPTI range counters."""
    return head[:2] == b"\x1f\x8b" or head.lstrip()[:1] == b"{"
