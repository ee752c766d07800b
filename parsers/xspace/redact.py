"""``traceview redact`` of an XSpace (``*.xplane.pb``): a copy with every secret replaced.

The file is decoded (protobuf), every text in it scrubbed by :class:`traceview.secrets.Scrubber`
(plane, line, event and stat names, text stats, the profiler's errors and warnings) and written
back. Beyond the shared rules, a user's name in a source path (``/home/<user>/``,
``/Users/<user>/``, ``experimental/users/<user>/``: XLA's source stats and the metadata of ops
name the files they came from) becomes ``<redacted>`` (rule ``user_path``). Host names
(``XSpace.hostnames``) are replaced (``hostname``). Binary stats and event metadata blobs are
serialized protos (the ``Hlo Proto`` of ``/host:metadata`` holds source paths): emptied, counted as
``binary_blob``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from traceview.redaction import atomic_output, check_paths
from traceview.secrets import REDACTED, RedactionReport, Scrubber

from .reading import load_xspace

#: ``home/<user>/``, ``Users/<user>/``, ``users/<user>/``: the user's name between fixed words
USER_PATH = re.compile(r"(?<![A-Za-z0-9_])((?:home|[Uu]sers)/)([^/\s:;,'\"]+)(?=/)")


class XSpaceScrubber:
    """The scrubber and the rules this format adds."""

    def __init__(self, strict: bool) -> None:
        self.scrubber = Scrubber(strict)

    def text(self, value: str, where: str) -> str:
        out = self.scrubber.text_cached(value, where)
        if "sers/" in out or "home/" in out:
            out = USER_PATH.sub(lambda m: self._user(m, where), out)
        return out

    def _user(self, match: re.Match[str], where: str) -> str:
        if match.group(2) == REDACTED:
            return match.group(0)
        self.scrubber.hit(where, "user_path")
        return match.group(1) + REDACTED

    def blob(self, holder: Any, field: str, where: str) -> None:
        if getattr(holder, field):
            setattr(holder, field, b"")
            self.scrubber.hit(where, "binary_blob")

    def stats(self, stats: Any, where: str) -> None:
        for stat in stats:
            which = stat.WhichOneof("value")
            if which == "str_value":
                stat.str_value = self.text(stat.str_value, where)
            elif which == "bytes_value":
                self.blob(stat, "bytes_value", where)


def _plane(s: XSpaceScrubber, plane: Any) -> None:
    where = f"plane[{plane.name}]"
    plane.name = s.text(plane.name, where)
    s.stats(plane.stats, where + ".stats")
    for meta in plane.stat_metadata.values():
        meta.name = s.text(meta.name, where + ".stat_metadata")
        meta.description = s.text(meta.description, where + ".stat_metadata")
    for meta in plane.event_metadata.values():
        meta.name = s.text(meta.name, where + ".event_metadata")
        meta.display_name = s.text(meta.display_name, where + ".event_metadata")
        s.blob(meta, "metadata", where + ".event_metadata")
        s.stats(meta.stats, where + ".event_metadata.stats")
    for line in plane.lines:
        line.name = s.text(line.name, where + ".line")
        line.display_name = s.text(line.display_name, where + ".line")
        for event in line.events:
            s.stats(event.stats, where + ".events.stats")


def redact_xspace(in_path: str | Path, out_path: str | Path, *, strict: bool = False) -> RedactionReport:
    """Write a shareable copy of an XSpace file; see the module docstring."""
    in_path, out_path = Path(in_path), Path(out_path)
    check_paths(in_path, out_path)
    message = load_xspace(in_path)
    s = XSpaceScrubber(strict)
    s.scrubber.report.input_format = "xspace"
    for i in range(len(message.hostnames)):
        message.hostnames[i] = REDACTED
        s.scrubber.hit("hostnames", "hostname")
    for field in ("errors", "warnings"):
        items = getattr(message, field)
        for i in range(len(items)):
            items[i] = s.text(items[i], field)
    for plane in message.planes:
        _plane(s, plane)
    with atomic_output(out_path) as tmp:
        tmp.write_bytes(message.SerializeToString())
    return s.scrubber.report
