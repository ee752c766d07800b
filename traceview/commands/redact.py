"""``traceview redact IN -o OUT [--strict]``: write a copy of a trace that is safe to share.

Secrets (tokens, API keys, passwords in environment dumps and command lines) are replaced by
``<redacted>``; with ``--strict`` host names, IP addresses, user names and directory parts of
paths go too. The format is detected by content. One summary line tells what was replaced, by
rule; ``--verbose`` lists where (key names only, never the values).
"""

from __future__ import annotations

from pathlib import Path

import typer

from traceview.commands.format_help import ANY_REDACTABLE_FORMAT


def command(
    path: Path = typer.Argument(..., help="Trace to redact, " + ANY_REDACTABLE_FORMAT),
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
    from traceview.redact import redact_file

    _, report = redact_file(path, output, strict=strict)  # as the file's format declares it
    mode = " (strict)" if strict else ""
    typer.echo(f"redacted {path} -> {output}{mode}: {report.summary()}")
    if verbose:
        for where, rules in report.locations().items():
            typer.echo(f"  {where}: " + ", ".join(f"{rule} {n:,}" for rule, n in rules.items()))
