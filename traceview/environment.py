"""The environment a trace was taken in: GPUs, world size, software versions, profiler settings.

Read from scrubbed metadata only (``traceview.secrets.scrub_metadata``): the most direct source of a
version wins (what the trace states itself, then metadata keys, then environment variables and
installed-package lists).
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from traceview.registry import INPUT_FORMATS, InputFormat

_CUDA_INT_KEYS = {"cuda_runtime_version": "cuda_runtime", "cuda_driver_version": "cuda_driver"}
_HIP_INT_KEYS = {"hip_runtime_version": "hip_runtime", "hip_driver_version": "hip_driver"}
#: keys (lower-case) anywhere in the metadata that name a version, and what of
_VERSION_KEYS = {
    "torch_version": "pytorch",
    "pytorch_version": "pytorch",
    "cuda_compiled_version": "pytorch_cuda_build",
    "cudnn_version": "cudnn",
    "nccl_version": "nccl",
    "rccl_version": "rccl",
    "nvidia_driver_version": "nvidia_driver",
    "hip_runtime_version": "hip_runtime",
    "hip_compiled_version": "pytorch_hip_build",
    "miopen_runtime_version": "miopen",
    "rocm_version": "rocm",
    "cupti_version": "cupti",
    "roctracer_version": "roctracer",
}
#: environment variables that name a version
_ENV_VERSIONS = {
    "PYTORCH_VERSION": "pytorch",
    "TORCH_VERSION": "pytorch",
    "CUDA_VERSION": "cuda_toolkit",
    "CUDNN_VERSION": "cudnn",
    "NV_CUDNN_VERSION": "cudnn",
    "NCCL_VERSION": "nccl",
    "ROCM_VERSION": "rocm",
    "HIP_VERSION": "hip_runtime",
}
_PIP_VERSIONS = {
    "torch": "pytorch",
    "nvidia-cudnn-cu11": "cudnn",
    "nvidia-cudnn-cu12": "cudnn",
    "nvidia-cudnn-cu13": "cudnn",
    "nvidia-nccl-cu11": "nccl",
    "nvidia-nccl-cu12": "nccl",
    "nvidia-nccl-cu13": "nccl",
}
_ENV_ASSIGN = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:=|:\s)\s*\"?([^\"]*)\"?\s*$")
_PIP = re.compile(r"^\s*([A-Za-z0-9_.\-]+)\s*==\s*(\S+)\s*$")
_UNKNOWN = {"", "n/a", "na", "none", "null", "unknown", "<redacted>", "0"}
#: profiler settings worth showing (Kineto top-level keys)
_PROFILER_KEYS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
#: tool versions the trace states under these keys
_TOOL_VERSION_KEYS = ("cupti_version", "roctracer_version")


def _cuda_version(value: Any) -> str | None:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return f"{v // 1000}.{(v % 1000) // 10}" if v > 0 else None


def _hip_version(value: Any) -> str | None:
    try:
        v = int(value)
    except (TypeError, ValueError):
        return None
    return f"{v // 10_000_000}.{(v // 100_000) % 100}.{v % 100_000}" if v > 0 else None


class _Versions:
    """Version candidates by name; the lowest priority number (most direct source) wins."""

    def __init__(self) -> None:
        self.best: dict[str, tuple[int, list[str], str]] = {}

    def offer(self, name: str, value: Any, source: str, priority: int) -> None:
        if value is None or isinstance(value, (dict, list, bool)):
            return
        text = str(value).strip()
        if text.lower() in _UNKNOWN or len(text) > 80:
            return
        current = self.best.get(name)
        if current is None or priority < current[0]:
            self.best[name] = (priority, [text], source)
        elif priority == current[0] and text not in current[1] and source == current[2]:
            current[1].append(text)

    def walk(self, obj: Any, path: str) -> None:
        if isinstance(obj, Mapping):
            for k, v in obj.items():
                key = str(k)
                sub = f"{path}.{key}" if path else key
                if key.lower() in _VERSION_KEYS and not isinstance(v, (dict, list)):
                    self.offer(_VERSION_KEYS[key.lower()], v, f"metadata {sub}", 2)
                elif key.upper() in _ENV_VERSIONS and not isinstance(v, (dict, list)):
                    self.offer(_ENV_VERSIONS[key.upper()], v, f"environment {key}", 3)
                else:
                    self.walk(v, sub)
        elif isinstance(obj, list):
            for item in obj:
                if isinstance(item, str):
                    self._string(item)
                else:
                    self.walk(item, path)

    def _string(self, text: str) -> None:
        m = _PIP.match(text)
        if m and m.group(1).lower() in _PIP_VERSIONS:
            self.offer(_PIP_VERSIONS[m.group(1).lower()], m.group(2), f"installed package {m.group(1)}", 2)
            return
        m = _ENV_ASSIGN.match(text)
        if m and m.group(1).upper() in _ENV_VERSIONS:
            self.offer(_ENV_VERSIONS[m.group(1).upper()], m.group(2), f"environment {m.group(1)}", 3)

    def result(self) -> dict[str, dict[str, str]]:
        return {name: {"value": " / ".join(values), "source": source}
                for name, (_, values, source) in sorted(self.best.items())}


#: words in a device name that give its vendor (checked in order, case-insensitive)
_VENDOR_WORDS = (("AMD", re.compile(r"\b(?:amd|instinct|radeon)\b|\bmi\d{3}", re.IGNORECASE)),
                 ("NVIDIA", re.compile(r"nvidia|tesla|geforce|quadro|\brtx\b|\b[ahlbt]\d{2,3}\b", re.IGNORECASE)),
                 ("Intel", re.compile(r"\bintel\b|\bxe\b|gaudi", re.IGNORECASE)))
#: keys a trace states that say which runtime, hence which vendor, recorded it
_VENDOR_KEYS = (("AMD", ("hip_runtime_version", "hip_driver_version", "roctracer_version")),
                ("NVIDIA", ("cuda_runtime_version", "cuda_driver_version", "cupti_version")))


def vendor_of(name: str | None, raw: Mapping[str, Any], source_format: str | None = None) -> str | None:
    """The accelerator's vendor: from its name when the name says (``AMD Instinct MI300X``), else from
    the runtime the trace states (``hip_runtime_version``: AMD; ``cuda_runtime_version``, or an Nsight
    Systems export: NVIDIA); None when nothing says."""
    for vendor, pattern in _VENDOR_WORDS:
        if name and pattern.search(name):
            return vendor
    for vendor, keys in _VENDOR_KEYS:
        if any(k in raw for k in keys):
            return vendor
    fmt = _input_format(source_format)
    return fmt.vendor if fmt is not None else None


def _input_format(name: str | None) -> InputFormat | None:
    """The input format ``name`` (a rank's ``source_format``) as its parser declared it, or None:
    what a format implies (vendor, producer) is the parser's declaration (``InputFormat``), never
    decided here. A parser registers its format when it is imported, which any load has done
    (``traceview.discovery``); nothing is imported from here, a layer below the parsers."""
    return INPUT_FORMATS.get(str(name)) if name else None


def _model_key(d: Mapping[str, Any]) -> tuple[Any, ...]:
    return (d.get("name") or "", d.get("sm_count"), d.get("total_memory_bytes"), d.get("compute_capability"))


def device_properties(devices: Mapping[int, Mapping[str, Any]], device: int) -> tuple[Mapping[str, Any], str]:
    """The properties of ``device`` (the id its events carry) among the listed ``devices``, and how
    they were found: ``"id"``; ``"only model"`` when the id is not listed but every listed device is
    the same model (ROCm numbers devices by HSA agent, CPUs first: a one-GPU MI300X trace has its
    kernels on device 2 and lists its GPU as id 0), so it can only be that model; else ``"unlisted"``
    and no properties."""
    if device in devices:
        return devices[device], "id"
    models = {_model_key(d) for d in devices.values()}
    if len(models) == 1 and next(iter(models))[0]:
        return {**next(iter(devices.values())), "id": device}, "only model"
    return {"id": device}, "unlisted"


def _add_gpus(gpus: dict[tuple[Any, ...], dict[str, Any]], rank: int, devices: Mapping[int, Mapping[str, Any]],
              used: list[int], info: Mapping[str, Any]) -> None:
    """Count the GPUs ``rank`` used (``info``: the rank's scrubbed metadata), grouped by model, SM
    count, memory and compute capability."""
    raw = info.get("raw_metadata") or {}
    for dev in used:
        d, matched = device_properties(devices, int(dev))
        key = _model_key(d)
        entry = gpus.setdefault(key, {
            "model": d.get("name") or None, "vendor": vendor_of(d.get("name"), raw, info.get("source_format")),
            "sm_count": d.get("sm_count"),
            "memory_bytes": d.get("total_memory_bytes"), "compute_capability": d.get("compute_capability"),
            "count": 0, "ranks": [], "matched_by": matched,
        })
        entry["count"] += 1
        if rank not in entry["ranks"]:
            entry["ranks"].append(rank)


def _offer_versions(versions: _Versions, raw: Mapping[str, Any], dist: Mapping[str, Any]) -> None:
    """Versions the trace states itself (most direct), then any found in its metadata."""
    for key, name in _CUDA_INT_KEYS.items():
        if key in raw:
            versions.offer(name, _cuda_version(raw[key]), f"trace {key}", 0)
    for key, name in _HIP_INT_KEYS.items():
        if key in raw:
            versions.offer(name, _hip_version(raw[key]), f"trace {key}", 0)
    for key in _TOOL_VERSION_KEYS:
        if key in raw:
            versions.offer(_VERSION_KEYS[key], raw[key], f"trace {key}", 0)
    if dist.get("nccl_version"):
        versions.offer("nccl", dist["nccl_version"], "distributedInfo.nccl_version", 0)
    export = raw.get("export")
    if isinstance(export, Mapping) and export.get("EXPORT_PRODUCT_VERSION"):
        versions.offer("nsight_systems", export["EXPORT_PRODUCT_VERSION"], "export metadata", 0)
    versions.walk({k: v for k, v in raw.items() if k not in _CUDA_INT_KEYS and k not in _HIP_INT_KEYS
                   and k not in _TOOL_VERSION_KEYS}, "")


def _producer(info: Mapping[str, Any]) -> str | None:
    version = f" ({info['format_version']})" if info.get("format_version") else ""
    fmt = _input_format(info.get("source_format"))
    return fmt.producer_name + version if fmt is not None else None


def environment(safe_ranks: Mapping[int, Mapping[str, Any]], used: Mapping[int, list[int]]) -> dict[str, Any]:
    """GPUs, world size, software versions and profiler settings, from scrubbed metadata only
    (``safe_ranks``: ``traceview.secrets.scrub_metadata`` of the ranks; ``used``: each rank's devices
    with activity)."""
    gpus: dict[tuple[Any, ...], dict[str, Any]] = {}
    listed = 0
    versions = _Versions()
    profiler: dict[str, Any] = {}
    backends: set[str] = set()
    world_sizes: set[int] = set()
    producers: set[str] = set()
    for rank in sorted(safe_ranks):
        info = safe_ranks[rank]
        devices = {int(d["id"]): d for d in info.get("devices") or []}
        listed = max(listed, len(devices))
        _add_gpus(gpus, rank, devices, used.get(rank, []), info)
        raw = info.get("raw_metadata") or {}
        dist = info.get("distributed_info") or {}
        if info.get("world_size"):
            world_sizes.add(int(info["world_size"]))
        if dist.get("backend"):
            backends.add(str(dist["backend"]))
        _offer_versions(versions, raw, dist)
        for key in _PROFILER_KEYS:
            if key in raw and not isinstance(raw[key], (dict, list)):
                profiler[key] = bool(raw[key]) if raw[key] in (0, 1, True, False) else raw[key]
        producer = _producer(info)
        if producer:
            producers.add(producer)
    return {
        "gpus": sorted(gpus.values(), key=lambda g: (-g["count"], str(g["model"]))),
        "gpus_listed_per_rank": listed,
        "world_size": max(world_sizes) if world_sizes else None,
        "backend": ", ".join(sorted(backends)) or None,
        "versions": versions.result(),
        "profiler": profiler,
        "trace_formats": sorted(producers),
    }
