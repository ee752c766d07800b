"""The environment a report states: which accelerators (model, vendor, SMs/CUs, compute capability)
the trace's devices are, for NVIDIA and AMD traces alike."""

from __future__ import annotations

import pytest

import traceview.parsers.nsys  # noqa: F401  (registers the Nsight formats, whose declaration says NVIDIA)
from traceview.environment import device_properties, environment, vendor_of

MI300X = {"name": "AMD Instinct MI300X", "sm_count": 304, "total_memory_bytes": 206141652992,
          "compute_capability": "9.4"}
HIP = {"hip_runtime_version": 60443483, "roctracer_version": 4.1}


def rank(devices: list[dict], raw: dict, fmt: str = "kineto") -> dict:
    return {"devices": devices, "raw_metadata": raw, "source_format": fmt}


@pytest.mark.parametrize("name, raw, fmt, vendor", [
    ("AMD Instinct MI300X VF", {}, "kineto", "AMD"),
    ("NVIDIA H100 80GB HBM3", HIP, "kineto", "NVIDIA"),  # the name wins over the runtime
    ("Tesla V100-SXM2-32GB", {}, "kineto", "NVIDIA"),
    ("", HIP, "kineto", "AMD"),
    (None, {"cuda_runtime_version": 12040}, "kineto", "NVIDIA"),
    (None, {}, "nsys", "NVIDIA"),
    ("Mystery accelerator", {}, "kineto", None),
])
def test_vendor(name, raw, fmt, vendor) -> None:
    assert vendor_of(name, raw, fmt) == vendor


def test_rocm_device_numbering_finds_the_only_listed_model() -> None:
    """ROCm numbers devices by HSA agent (CPUs first): a one-GPU MI300X trace has its kernels on
    device 2 and lists its GPU as id 0; it can only be that GPU."""
    env = environment({0: rank([{"id": 0, **MI300X}], HIP)}, {0: [2]})
    [gpu] = env["gpus"]
    assert (gpu["model"], gpu["vendor"], gpu["sm_count"], gpu["compute_capability"]) == (
        "AMD Instinct MI300X", "AMD", 304, "9.4")
    assert gpu["matched_by"] == "only model" and gpu["count"] == 1


def test_an_unlisted_device_among_different_models_stays_unknown() -> None:
    devices = {0: {"id": 0, **MI300X}, 1: {"id": 1, "name": "AMD Radeon PRO W7900", "sm_count": 96}}
    props, how = device_properties(devices, 2)
    assert how == "unlisted" and props == {"id": 2}
    env = environment({0: rank(list(devices.values()), HIP)}, {0: [2]})
    [gpu] = env["gpus"]
    assert gpu["model"] is None and gpu["vendor"] == "AMD"  # the runtime still says whose it is
    props, how = device_properties(devices, 1)
    assert how == "id" and props["name"] == "AMD Radeon PRO W7900"


def test_mi300x_shared_trace_names_its_gpu() -> None:
    from conftest import require_shared
    import traceview

    path = require_shared() / "kineto" / "tracelens_qwen05b_mi300x.json.gz"
    report = traceview.analyze(path)
    [gpu] = report["environment"]["gpus"]
    assert gpu["model"].startswith("AMD Instinct MI300X") and gpu["vendor"] == "AMD"
    assert gpu["sm_count"] == 304 and gpu["compute_capability"] == "9.4"
    assert report["summary"]["gpu_models"] == [gpu["model"]]
