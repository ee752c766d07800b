"""GPU specifications: peak FLOP/s per dtype, memory bandwidth and links, by the device name a trace records.

The table ships as ``gpus.toml`` beside this module (units and conventions are in its header and in
docs/metrics.md, "Hardware peaks"). Every peak is dense; a figure the vendor does not publish is
absent, and the helpers here return ``None`` for it so that callers can say what they could not
compute instead of printing a guess. A built-in figure counts only once a cited vendor source was
checked to give it: each entry's ``verified`` list names those fields, and the helpers treat any
other figure like a missing one (:func:`is_verified`). A user TOML file in the same format overrides
fields of a built-in entry or adds new entries (:func:`load_specs`); the figures it gives are the
user's own and count as verified.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from traceview.errors import TraceFormatError, os_error

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 ships no TOML parser
    import tomli as tomllib

__all__ = ["GpuSpec", "Source", "DTYPES", "load_specs", "match_gpu", "normalize_dtype", "peak_flops",
           "memory_bandwidth_bytes_per_s", "interconnect_bytes_per_s", "ridge_point", "missing_peak_reason",
           "is_verified", "unverified_fields"]

#: dtype keys a table may give peaks for (int8 is in TOP/s)
DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8")
_TERA = 1e12
_GIGA = 1e9
_HINT = "see the override format in docs/metrics.md, section 'Hardware peaks'"


@dataclass(frozen=True)
class Source:
    title: str
    url: str


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model as the table gives it: vendor figures per package (see ``devices_per_package``)."""

    key: str
    name: str
    vendor: str
    architecture: str
    match: tuple[str, ...]
    aliases: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    sm_count: int | None = None  # SMs (NVIDIA) or compute units (AMD)
    boost_clock_mhz: float | None = None
    memory_gb: float | None = None
    memory_bandwidth_gbs: float | None = None
    l2_cache_mb: float | None = None
    last_level_cache_mb: float | None = None  # AMD Infinity Cache
    interconnect: str | None = None
    interconnect_gbs: float | None = None
    devices_per_package: int = 1
    vector_tflops: Mapping[str, float] = field(default_factory=dict)
    tensor_tflops: Mapping[str, float] = field(default_factory=dict)
    notes: str = ""
    sources: tuple[Source, ...] = ()
    # the figures a source was checked to give: field names, or "tensor_tflops.bf16" for one peak
    verified: frozenset[str] = frozenset()
    origin: str = ""  # the file the entry (or its last override) came from


# ------------------------------------------------------------------------------------------------
# reading and validating a table

_TEXT_FIELDS = ("name", "vendor", "architecture", "interconnect", "notes")
_LIST_FIELDS = ("match", "aliases", "examples")
_NUMBER_FIELDS = ("boost_clock_mhz", "memory_gb", "memory_bandwidth_gbs", "l2_cache_mb", "last_level_cache_mb",
                  "interconnect_gbs")
_INT_FIELDS = ("sm_count", "devices_per_package")
_PEAK_FIELDS = ("vector_tflops", "tensor_tflops")
_REQUIRED = ("name", "vendor", "architecture", "match")
_KNOWN = set(_TEXT_FIELDS + _LIST_FIELDS + _NUMBER_FIELDS + _INT_FIELDS + _PEAK_FIELDS + ("sources", "verified"))
# figures that can be verified (devices_per_package is how the runtime shows a package, not a vendor figure)
_FIGURES = _NUMBER_FIELDS + ("sm_count",)


class _Bad(Exception):
    """A problem in one field: (dotted key, what is wrong); turned into a TraceFormatError naming the file."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def _positive(key: str, value: Any, integer: bool = False) -> float | int:
    # bool is an int in Python; "true" is not a count
    ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type or not math.isfinite(value) or value <= 0:
        kind = "a positive whole number" if integer else "a positive number"
        raise _Bad(key, f"must be {kind}, got {value!r}")
    return value


def _check_field(key: str, name: str, value: Any) -> Any:
    """The validated value of one entry field (``key`` is ``gpus.<id>.<name>``, for the message)."""
    if name not in _KNOWN:
        raise _Bad(key, f"unknown field (known: {', '.join(sorted(_KNOWN))})")
    if name in _TEXT_FIELDS:
        if not isinstance(value, str):
            raise _Bad(key, f"must be a string, got {value!r}")
        return value
    if name in _LIST_FIELDS:
        return _check_list(key, name, value)
    if name in _NUMBER_FIELDS:
        return float(_positive(key, value))
    if name in _INT_FIELDS:
        return int(_positive(key, value, integer=True))
    if name in _PEAK_FIELDS:
        return _check_peaks(key, value)
    if name == "verified":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise _Bad(key, "must be a list of field names (\"memory_bandwidth_gbs\", \"tensor_tflops.bf16\")")
        return frozenset(value)
    return _check_sources(key, value)


def _check_list(key: str, name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _Bad(key, "must be a list of non-empty strings")
    if name == "match":
        if not value:
            raise _Bad(key, "must list at least one regular expression")
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise _Bad(key, f"{pattern!r} is not a valid regular expression ({exc})") from None
    return tuple(value)


def _check_peaks(key: str, value: Any) -> dict[str, float]:
    if not isinstance(value, dict):
        raise _Bad(key, "must be a table of dtype = TFLOP/s")
    for dtype, peak in value.items():
        if dtype not in DTYPES:
            raise _Bad(f"{key}.{dtype}", f"unknown dtype (known: {', '.join(DTYPES)})")
        _positive(f"{key}.{dtype}", peak)
    return {dtype: float(peak) for dtype, peak in value.items()}


def _check_sources(key: str, value: Any) -> tuple[Source, ...]:
    if not isinstance(value, list):
        raise _Bad(key, "must be a list of { title = ..., url = ... } tables")
    out = []
    for item in value:
        if (not isinstance(item, dict) or set(item) != {"title", "url"}
                or not all(isinstance(v, str) and v for v in item.values())):
            raise _Bad(key, "each source must be { title = \"...\", url = \"...\" }")
        out.append(Source(item["title"], item["url"]))
    return tuple(out)


def _entries(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = set(doc) - {"gpus"}
    if extra:
        raise _Bad(sorted(extra)[0], "unknown top-level key (entries go under [gpus.<id>])")
    gpus = doc.get("gpus", {})
    if not isinstance(gpus, dict):
        raise _Bad("gpus", "must be a table of [gpus.<id>] entries")
    for gpu_id, entry in gpus.items():
        if not isinstance(entry, dict):
            raise _Bad(f"gpus.{gpu_id}", "must be a table")
    return gpus


def _figures(spec: GpuSpec) -> set[str]:
    """The names of the figures ``spec`` gives, as a ``verified`` list names them."""
    names = {name for name in _FIGURES if getattr(spec, name) is not None}
    for table in _PEAK_FIELDS:
        names.update(f"{table}.{dtype}" for dtype in getattr(spec, table))
    return names


def _given(fields: Mapping[str, Any]) -> set[str]:
    """The figures one entry of a file sets (a user file's own figures count as verified)."""
    names = {name for name in _FIGURES if name in fields}
    for table in _PEAK_FIELDS:
        names.update(f"{table}.{dtype}" for dtype in fields.get(table, {}))
    return names


def _merge(base: GpuSpec | None, gpu_id: str, entry: Mapping[str, Any], origin: str, user: bool) -> GpuSpec:
    """``base`` with the fields of ``entry`` applied (peak tables are merged per dtype). In a ``user``
    file the figures the entry sets join ``verified``; the built-in table must list them itself."""
    fields: dict[str, Any] = {}
    for name, value in entry.items():
        fields[name] = _check_field(f"gpus.{gpu_id}.{name}", name, value)
    verified = set(fields.pop("verified", frozenset())) | (_given(fields) if user else set())
    if base is None:
        missing = [name for name in _REQUIRED if name not in fields]
        if missing:
            raise _Bad(f"gpus.{gpu_id}.{missing[0]}", "is required for a new GPU entry")
        spec = GpuSpec(key=gpu_id, origin=origin, **fields)
    else:
        for name in _PEAK_FIELDS:
            if name in fields:
                fields[name] = {**getattr(base, name), **fields[name]}
        values = {f: getattr(base, f) for f in base.__dataclass_fields__}
        values.update(fields, origin=origin)
        verified |= base.verified
        spec = GpuSpec(**values)
    unknown = sorted(verified - _figures(spec))
    if unknown:
        raise _Bad(f"gpus.{gpu_id}.verified", f"{unknown[0]!r} names no figure of this entry")
    return replace(spec, verified=frozenset(verified))


def _read_table(path: Path, text: str, base: Mapping[str, GpuSpec], user: bool) -> dict[str, GpuSpec]:
    """``base`` extended and overridden by the TOML ``text`` of ``path``; one-line error on bad input."""
    try:
        doc = tomllib.loads(text)
        specs = dict(base)
        for gpu_id, entry in _entries(doc).items():
            specs[gpu_id] = _merge(specs.get(gpu_id), gpu_id, entry, str(path), user)
    except tomllib.TOMLDecodeError as exc:
        raise TraceFormatError(path, f"is not valid TOML: {exc}", _HINT) from None
    except _Bad as exc:
        raise TraceFormatError(path, f"{exc.key}: {exc.problem}", _HINT) from None
    return specs


@lru_cache(maxsize=1)
def _builtin() -> Mapping[str, GpuSpec]:
    resource = resources.files(__name__).joinpath("gpus.toml")
    return _read_table(Path(str(resource)), resource.read_text(encoding="utf-8"), {}, user=False)


def load_specs(extra: Path | None = None) -> dict[str, GpuSpec]:
    """The built-in table, with the user file ``extra`` (same format) overriding fields or adding GPUs."""
    specs = dict(_builtin())
    if extra is None:
        return specs
    try:
        text = Path(extra).read_text(encoding="utf-8")
    except OSError as exc:
        raise os_error(extra, exc) from None
    except UnicodeDecodeError:
        raise TraceFormatError(extra, "is not UTF-8 text", _HINT) from None
    return _read_table(Path(extra), text, specs, user=True)


# ------------------------------------------------------------------------------------------------
# matching device names


@lru_cache(maxsize=8)
def _compiled(patterns: tuple[tuple[str, tuple[str, ...]], ...]) -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((key, re.compile(p, re.IGNORECASE)) for key, ps in patterns for p in ps)


def match_gpu(device_name: str, specs: Mapping[str, GpuSpec] | None = None) -> GpuSpec | None:
    """The model whose pattern matches the longest part of ``device_name``; ``None`` when no pattern
    matches, or when two models tie (an ambiguous name is not guessed)."""
    table = _builtin() if specs is None else specs
    name = " ".join(str(device_name).split())
    if not name:
        return None
    patterns = tuple((key, spec.match) for key, spec in table.items())
    best: dict[str, int] = {}
    for key, regex in _compiled(patterns):
        found = regex.search(name)
        if found:
            best[key] = max(best.get(key, 0), len(found.group(0)))
    if not best:
        return None
    longest = max(best.values())
    winners = [key for key, length in best.items() if length == longest]
    return table[winners[0]] if len(winners) == 1 else None


# ------------------------------------------------------------------------------------------------
# peaks

_DTYPE_ALIASES = {
    "double": "fp64", "float64": "fp64", "fp64": "fp64",
    "float": "fp32", "float32": "fp32", "fp32": "fp32",
    "tf32": "tf32", "tensorfloat32": "tf32",
    "bfloat16": "bf16", "bf16": "bf16",
    "half": "fp16", "float16": "fp16", "fp16": "fp16",
    "int8": "int8", "qint8": "int8", "signed char": "int8", "char": "int8",
}
_PREFIXES = ("fp8", "float8", "fp6", "float6", "fp4", "float4", "nvfp4", "mxfp4", "mxfp6", "mxfp8")


def normalize_dtype(dtype: str) -> str | None:
    """``"c10::BFloat16"``, ``"torch.float16"``, ``"Float8_e4m3fn"`` ... -> a :data:`DTYPES` key, or None."""
    text = str(dtype).strip().lower()
    for prefix in ("c10::", "at::", "torch."):
        text = text.removeprefix(prefix)
    if text in _DTYPE_ALIASES:
        return _DTYPE_ALIASES[text]
    for prefix in _PREFIXES:
        if text.startswith(prefix):
            return "fp" + next(ch for ch in prefix if ch.isdigit())
    return None


def is_verified(spec: GpuSpec, figure: str) -> bool:
    """Whether a cited source was checked to give ``figure`` (``"memory_bandwidth_gbs"``,
    ``"tensor_tflops.bf16"``), or a user file gave it."""
    return figure in spec.verified


def unverified_fields(spec: GpuSpec) -> tuple[str, ...]:
    """The figures ``spec`` holds that no checked source confirms (the helpers do not use them)."""
    return tuple(sorted(_figures(spec) - spec.verified))


def peak_flops(spec: GpuSpec, dtype: str, tensor: bool = True) -> float | None:
    """Dense peak in FLOP/s (OP/s for int8) of one device as the runtime sees it, on tensor/matrix
    units (``tensor=True``) or vector units; ``None`` when the dtype is unknown, the vendor does
    not publish that figure, or the table's figure is not verified (an unchecked peak would give an
    efficiency that looks measured and is not: :func:`missing_peak_reason` says which case)."""
    key = normalize_dtype(dtype)
    if key is None:
        return None
    table = "tensor_tflops" if tensor else "vector_tflops"
    peak = getattr(spec, table).get(key)
    if peak is None or not is_verified(spec, f"{table}.{key}"):
        return None
    return peak * _TERA / spec.devices_per_package


def memory_bandwidth_bytes_per_s(spec: GpuSpec) -> float | None:
    """Peak device-memory bandwidth of one device (bytes/s), or None when not published or not verified."""
    if spec.memory_bandwidth_gbs is None or not is_verified(spec, "memory_bandwidth_gbs"):
        return None
    return spec.memory_bandwidth_gbs * _GIGA / spec.devices_per_package


def interconnect_bytes_per_s(spec: GpuSpec) -> float | None:
    """GPU-to-GPU link bandwidth of one device (bytes/s, all links, both directions, as vendors quote
    it), or None when not published or not verified."""
    if spec.interconnect_gbs is None or not is_verified(spec, "interconnect_gbs"):
        return None
    return spec.interconnect_gbs * _GIGA / spec.devices_per_package


def ridge_point(spec: GpuSpec, dtype: str, tensor: bool = True) -> float | None:
    """Arithmetic intensity (FLOP/byte) where the roofline turns from memory- to compute-bound:
    peak FLOP/s over memory bandwidth; None when either is missing."""
    flops = peak_flops(spec, dtype, tensor)
    bandwidth = memory_bandwidth_bytes_per_s(spec)
    if flops is None or bandwidth is None:
        return None
    return flops / bandwidth


#: accelerators a trace names that are not GPUs (XSpace: ``/device:TPU:N`` planes; the XLA CPU
#: backend's one device): the GPU table has none of them, and the report says so as such
NOT_GPUS = ("TPU", "CPU")


def missing_peak_reason(device_name: str, spec: GpuSpec | None, dtype: str, tensor: bool = True) -> str | None:
    """Why a peak cannot be given (one sentence for the report), or None when it can."""
    if spec is None and device_name.strip().split(" ")[0] in NOT_GPUS:
        return (f"{device_name.strip()} is not a GPU: the GPU table has no peak FLOP/s or bandwidth for it, so "
                "no roofline or efficiency (give its peaks in a GPU specification file to have them)")
    if spec is None:
        shown = device_name.strip() or "(no name recorded)"
        return (f"unknown GPU {shown!r}: no peak FLOP/s or bandwidth, so no roofline or efficiency "
                "(add it with a GPU specification file)")
    key = normalize_dtype(dtype)
    if key is None:
        return f"dtype {dtype!r} has no peak in the GPU table"
    table, units = ("tensor_tflops", "tensor-core") if tensor else ("vector_tflops", "vector")
    if key not in getattr(spec, table):
        return f"{spec.name}: the vendor publishes no dense {key} {units} peak"
    if peak_flops(spec, key, tensor) is None:
        return (f"{spec.name}: the table's dense {key} {units} peak is not verified against a vendor source "
                "(give it in a GPU specification file to use it)")
    if spec.memory_bandwidth_gbs is None:
        return f"{spec.name}: no published memory bandwidth"
    if memory_bandwidth_bytes_per_s(spec) is None:
        return (f"{spec.name}: the table's memory bandwidth is not verified against a vendor source "
                "(give it in a GPU specification file to use it)")
    return None
