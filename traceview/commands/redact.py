"""``traceview redact IN -o OUT [--strict]``: write a copy of a trace that is safe to share.

Secrets (tokens, API keys, passwords in environment dumps and command lines) are replaced by
``<redacted>``; with ``--strict`` host names, IP addresses, user names and directory parts of
paths go too. The format is detected by content. One summary line tells what was replaced, by
rule; ``--verbose`` lists where (key names only, never the values).
"""

from __future__ import annotations

from pathlib import Path

import typer

from traceview.errors import TraceFormatError


def command(
    path: Path = typer.Argument(..., help="Trace to redact: Kineto .json/.json.gz or Nsight Systems .sqlite export."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the redacted copy."),
    strict: bool = typer.Option(
        False, "--strict", help="Also remove host names, IP addresses, user names and directories of paths."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="List where replacements were made (key names only, never values)."),
) -> None:
    """Write a shareable copy of a trace with secrets replaced by <redacted>.

    Example: traceview redact rank0.json.gz -o rank0.shared.json.gz --strict
    """
    # imported here: the CLI imports every command module at start (traceview/cli.py)
    from traceview.discovery import detect_format
    from traceview.redact import redact_kineto, redact_nsys

    fmt = detect_format(path)
    if fmt == "nsys-rep":
        raise TraceFormatError(path, "is an Nsight Systems report, not its SQLite export",
                               "run `nsys export --type sqlite` first and redact the .sqlite file")
    redact = redact_kineto if fmt == "kineto" else redact_nsys
    report = redact(path, output, strict=strict)
    mode = " (strict)" if strict else ""
    typer.echo(f"redacted {path} -> {output}{mode}: {report.summary()}")
    if verbose:
        for where, rules in report.locations().items():
            typer.echo(f"  {where}: " + ", ".join(f"{rule} {n:,}" for rule, n in rules.items()))
