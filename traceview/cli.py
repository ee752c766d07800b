"""The ``traceview`` command line: one module per command in ``traceview.commands``.

User errors (missing file, not a trace, corrupt input) print one line and exit 2; they never
show a traceback. ``TRACEVIEW_DEBUG=1`` shows tracebacks for unexpected errors.

Start time matters (``traceview --help``, ``traceview info``: benchmarks/bench_start.py): this
module and every command module import only typer and the standard library at the top; each
command imports what it uses (numpy, pyarrow, pandas, rich, the pipeline) inside its function.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import typer

from traceview.errors import TraceviewError

#: CLI commands, in help order; each is the module ``traceview.commands.<name>`` exposing ``command``
#: (a dash in a name is an underscore in the module's: ``export-perfetto`` is ``export_perfetto``; the
#: other modules of the package, ``_common``, ``formats`` and ``format_help``, are helpers the commands share)
COMMANDS = ("analyze", "info", "convert", "redact", "diff", "check", "app", "export-perfetto", "history", "sql")

app = typer.Typer(
    name="traceview",
    help="Turn GPU profiler traces (PyTorch/Kineto, Nsight Systems, JAX/TensorFlow XSpace, AMD rocprofv3, ...: "
         "traceview analyze --help lists every format) into answers.",
    epilog="Example: traceview analyze run/ (then traceview COMMAND --help for each command's options).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # plain click help: typer's rich help imports rich.markdown, markdown_it and rich.traceback,
    # which alone take 2-3x the start time of the rest (benchmarks/bench_start.py)
    rich_markup_mode=None,
    # as wide as the terminal up to 160 columns (click's default stops at 80)
    context_settings={"max_content_width": 160},
)


def _print_version(value: bool) -> None:
    if value:
        from traceview import __version__

        typer.echo(f"traceview {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="Print traceview's version and exit.")) -> None:
    """The options before any command (``--version``)."""


#: the metavar of an option by the type of its value (typer's own reads ``<str>``, ``<int range>``):
#: typer 0.28 names the click type (``int range``, ``path``), later versions the annotation (``Path``)
TYPE_METAVARS = {"str": "TEXT", "int": "N", "int range": "N", "float": "NUMBER", "float range": "NUMBER",
                 "Path": "PATH", "path": "PATH", "list[str]": "TEXT", "bool": "yes|no", "boolean": "yes|no"}


def readable_metavars(command: Any) -> Any:
    """``command`` (the click command typer builds) with readable value names in its help: an option
    without a metavar of its own shows TEXT, N, NUMBER, PATH instead of ``<str>``, ``<int range>``,
    ``<path>``; an argument shows its name in capitals (``PATHS...``), which says what it takes."""
    for sub in (getattr(command, "commands", None) or {}).values():
        readable_metavars(sub)
    for param in getattr(command, "params", []):
        if getattr(param, "is_flag", False) or not hasattr(param, "param_type_name"):
            continue
        if param.param_type_name == "argument":
            param.metavar = param.metavar or str(param.name).upper()
            # typer adds the type after the name (``PATHS... <list[str]>``): the name is enough
            param.display_type_rich = lambda **_: None
        elif param.metavar is None:
            param.metavar = TYPE_METAVARS.get(value_type_name(param), "VALUE")
    return command


def value_type_name(param: Any) -> str:
    """The name typer gives the type of ``param``'s value: its annotation (``bare_type``, typer
    0.29) or its click type's name (typer 0.28)."""
    bare_type = getattr(param, "bare_type", None)
    if callable(bare_type):
        return str(bare_type())
    return str(getattr(getattr(param, "type", None), "name", ""))


def command_module(name: str) -> str:
    """The module (in ``traceview.commands``) of the command ``name``."""
    return name.replace("-", "_")


# every command module is imported: a missing one is a packaging bug, not something to skip
for _name in COMMANDS:
    app.command(_name)(importlib.import_module(f"traceview.commands.{command_module(_name)}").command)


def _click_exceptions(name: str) -> tuple[type[BaseException], ...]:
    """The click exception class ``name`` from click and from typer's bundled copy of click
    (typer >= 0.29 ships its own, so ``click.ClickException`` alone misses its usage errors)."""
    found = []
    for module in ("typer._click.exceptions", "click.exceptions"):
        try:
            found.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def main() -> None:
    try:
        # standalone_mode=False returns a command's exit code instead of raising it
        code = readable_metavars(typer.main.get_command(app)).main(prog_name="traceview", standalone_mode=False)
    except TraceviewError as exc:
        raise SystemExit(_one_line(str(exc), 2))
    except KeyboardInterrupt:
        raise SystemExit(_one_line("interrupted", 130))
    except typer.Exit as exc:
        raise SystemExit(exc.exit_code)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors and genuine bugs
        if isinstance(exc, _click_exceptions("ClickException")):
            usage_error: Any = exc  # click's ClickException, from click or typer's copy of it
            usage_error.show()  # usage errors: click's own message, exit 2
            raise SystemExit(usage_error.exit_code)
        if isinstance(exc, _click_exceptions("Abort")):
            raise SystemExit(_one_line("aborted", 1))
        if os.environ.get("TRACEVIEW_DEBUG"):
            raise
        raise SystemExit(_one_line(
            f"internal error: {type(exc).__name__}: {exc} (this is a bug in traceview; "
            "rerun with TRACEVIEW_DEBUG=1 for the traceback and report it)", 3))
    raise SystemExit(code if isinstance(code, int) else 0)


def _one_line(message: str, code: int) -> int:
    print(f"traceview: error: {message}", file=sys.stderr)
    return code


def run() -> None:
    """The ``traceview`` console script: :func:`main`, then the command process's exit
    (:func:`traceview.runtime.exit_process`: the exit handlers, then no interpreter teardown).
    :func:`main` itself exits normally, for callers in a Python process (tests)."""
    from traceview.runtime import exit_process

    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exit_status(exc.code)
    exit_process(code)


def exit_status(code: object) -> int:
    """The process's exit status for ``SystemExit(code)``, as the interpreter makes it (a message is
    printed to standard error and gives 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    run()
