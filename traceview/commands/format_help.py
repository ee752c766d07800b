"""The input formats in the help of the commands that take traces: each such argument's help ends
with :data:`ANY_TRACE_FORMAT` (or :data:`ANY_REDACTABLE_FORMAT`), and the registered formats are
filled in after it when the help is shown, so a new ``InputFormat`` appears there by itself (and a
command that runs imports no parser for its help)."""

from __future__ import annotations

#: how the help of an argument that takes traces ends; the registered input formats are filled in
#: after it when the help is shown (``with_format_lists``), so a new format appears there by itself
#: and the start of other commands imports no parser
ANY_TRACE_FORMAT = "in any input format:"
ANY_REDACTABLE_FORMAT = "in any format that can be redacted:"


def format_list(redactable: bool = False) -> str:
    """The registered trace formats (those a folder scan reads; with ``redactable``, those with a
    redaction), each as its description."""
    from traceview.discovery import registered_formats

    formats = [f for f in registered_formats() if f.suffixes and (f.redact is not None or not redactable)]
    return "; ".join(f.description for f in formats) + "."


def with_format_lists(command: object) -> object:
    """``command`` (a click command) whose help, when shown, has the format list after each
    parameter help that ends with :data:`ANY_TRACE_FORMAT` or :data:`ANY_REDACTABLE_FORMAT`."""
    params = [p for p in getattr(command, "params", []) if str(getattr(p, "help", "") or "").endswith(
        (ANY_TRACE_FORMAT, ANY_REDACTABLE_FORMAT))]
    if not params:
        return command
    shown = command.format_help  # type: ignore[attr-defined]

    def format_help(ctx: object, formatter: object) -> None:
        for param in params:
            if param.help.endswith((ANY_TRACE_FORMAT, ANY_REDACTABLE_FORMAT)):
                param.help = f"{param.help} {format_list(param.help.endswith(ANY_REDACTABLE_FORMAT))}"
        shown(ctx, formatter)

    command.format_help = format_help  # type: ignore[attr-defined]
    return command
