"""The GPU specification table (traceview/hardware): device-name matching on every name the shared and
sample traces record, tricky names, the table's internal consistency, and user override files."""

from __future__ import annotations

import functools
import gzip
import sqlite3
from pathlib import Path

import msgspec
import pytest

from conftest import REPO, SAMPLE_TRACES, SHARED_TRACES, require_shared
from traceview.errors import TraceviewError
from traceview.hardware import (
    DTYPES,
    GpuSpec,
    interconnect_bytes_per_s,
    is_verified,
    load_specs,
    match_gpu,
    memory_bandwidth_bytes_per_s,
    missing_peak_reason,
    normalize_dtype,
    peak_flops,
    ridge_point,
    unverified_fields,
)

# every device name the shared and sample traces carry -> the table entry it is
TRACE_DEVICE_NAMES = {
    "NVIDIA A100-PG509-200": "a100_sxm4_40gb",
    "Tesla V100-SXM2-32GB": "v100_sxm2",
    "Tesla V100-DGXS-32GB": "v100_sxm2",
    "Tesla V100-PCIE-32GB": "v100_pcie",
    "Quadro GP100": "quadro_gp100",
    "NVIDIA H100 80GB HBM3": "h100_sxm",
    "AMD Instinct MI300X": "mi300x",
    "AMD Instinct MI300X VF": "mi300x",
    "": None,  # the vLLM trace records an empty name: nothing to match, never a guess
}


@functools.cache
def _trace_devices(root: Path) -> list[tuple[str, str, dict]]:
    """(file, device name, the properties the file records) for every device in the traces under root."""
    found = []
    for path in sorted(root.rglob("*.json.gz")):
        doc = msgspec.json.decode(gzip.open(path).read())
        props = doc.get("deviceProperties") if isinstance(doc, dict) else None
        for device in props or []:
            found.append((path.name, device.get("name", ""),
                          {"sm_count": device.get("numSms"), "memory_bytes": device.get("totalGlobalMem")}))
    for path in sorted(root.rglob("*.sqlite")):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as con:
            tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "TARGET_INFO_GPU" in tables:
                rows = con.execute("SELECT name, smCount, totalMemory, memoryBandwidth FROM TARGET_INFO_GPU")
                found += [(path.name, n, {"sm_count": sm, "memory_bytes": mem, "bandwidth_bytes_per_s": bw})
                          for n, sm, mem, bw in rows]
            if "TARGET_INFO_CUDA_GPU" in tables:  # oldest layout: memory in MiB
                rows = con.execute("SELECT name, numMultiprocessors, globalMemorySize FROM TARGET_INFO_CUDA_GPU")
                found += [(path.name, n, {"sm_count": sm, "memory_bytes": mib * 2**20}) for n, sm, mib in rows]
    return found


def _check_devices(devices: list[tuple[str, str, dict]]) -> None:
    assert devices, "no device names found: the trace layout changed?"
    for file, name, props in devices:
        assert name in TRACE_DEVICE_NAMES, f"{file}: device name {name!r} is new: add it to the table and this test"
        spec = match_gpu(name)
        assert (spec.key if spec else None) == TRACE_DEVICE_NAMES[name], f"{file}: {name!r} -> {spec}"
        if spec is None:
            continue
        # the trace's own figures check the match: SM/CU count, memory size, bandwidth
        if spec.sm_count and props.get("sm_count"):
            assert props["sm_count"] == spec.sm_count // spec.devices_per_package, (file, name)
        if spec.memory_gb and props.get("memory_bytes"):
            assert props["memory_bytes"] / 1e9 == pytest.approx(spec.memory_gb, rel=0.10), (file, name)
        if props.get("bandwidth_bytes_per_s") and spec.memory_bandwidth_gbs:  # the table's figure, verified or not
            table_bytes_per_s = spec.memory_bandwidth_gbs * 1e9 / spec.devices_per_package
            assert props["bandwidth_bytes_per_s"] == pytest.approx(table_bytes_per_s, rel=0.02), (file, name)


def test_every_device_name_in_the_sample_traces_matches() -> None:
    _check_devices(_trace_devices(SAMPLE_TRACES))


def test_every_device_name_in_the_shared_traces_matches() -> None:
    _check_devices(_trace_devices(require_shared()))


def test_the_shared_traces_cover_the_names_listed_here() -> None:
    if not SHARED_TRACES.exists():
        pytest.skip(f"real traces not available: {SHARED_TRACES} is absent")
    seen = {name for _, name, _ in _trace_devices(SHARED_TRACES) + _trace_devices(SAMPLE_TRACES)}
    assert seen == set(TRACE_DEVICE_NAMES)


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H100 NVL", "h100_nvl"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200_nvl"),
    ("NVIDIA H20", "h20"),
    ("NVIDIA H800", "h800_sxm"),
    ("NVIDIA H800 PCIe", "h800_pcie"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA GH200 144G HBM3e", "gh200_144gb"),
    ("NVIDIA A100-SXM4-40GB", "a100_sxm4_40gb"),
    ("NVIDIA A100-SXM4-80GB", "a100_sxm4_80gb"),
    ("NVIDIA A100-PCIE-40GB", "a100_pcie_40gb"),
    ("NVIDIA A100 80GB PCIe", "a100_pcie_80gb"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA A10G", None),  # AWS part with other figures
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L40", None),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GB200", "gb200"),
    ("NVIDIA B300 SXM6 AC", "b300"),
    ("Tesla T4", "t4"),
    ("NVIDIA GeForce RTX 4090", "rtx_4090"),
    ("NVIDIA GeForce RTX 4090 D", None),
    ("NVIDIA RTX 6000 Ada Generation", "rtx_6000_ada"),
    ("Quadro RTX 6000", None),  # Turing, not Ada
    ("NVIDIA GeForce RTX 3090", "rtx_3090"),
    ("NVIDIA GeForce RTX 3090 Ti", None),
    ("NVIDIA GeForce RTX 2080 Ti", "rtx_2080_ti"),
    ("AMD Instinct MI300X", "mi300x"),
    ("AMD Instinct MI325X", "mi325x"),
    ("AMD Instinct MI355X", "mi355x"),
    ("AMD Instinct MI210", "mi210"),
    ("AMD Instinct MI250X", "mi250x"),
    ("AMD Instinct MI250X/MI250", None),  # cannot tell MI250X from MI250
    ("  nvidia   h100   pcie ", "h100_pcie"),  # spacing and case do not matter
    ("Intel Data Center GPU Max 1550", None),
])
def test_tricky_names(name: str, expected: str | None) -> None:
    spec = match_gpu(name)
    assert (spec.key if spec else None) == expected


def test_every_required_model_is_in_the_table() -> None:
    required = ["v100_sxm2", "v100_pcie", "t4", "a10", "a100_sxm4_40gb", "a100_sxm4_80gb", "a100_pcie_40gb",
                "a100_pcie_80gb", "l4", "l40s", "h100_sxm", "h100_pcie", "h100_nvl", "h200", "h800_sxm", "h20",
                "gh200", "b200", "gb200", "b300", "rtx_2080_ti", "rtx_3090", "rtx_4090", "rtx_6000_ada", "mi210",
                "mi250x", "mi300x", "mi325x", "mi355x"]
    assert set(required) <= set(load_specs())


def test_every_example_name_maps_to_its_own_entry() -> None:
    specs = load_specs()
    for key, spec in specs.items():
        assert spec.examples, f"{key}: no example device name"
        for example in spec.examples:
            found = match_gpu(example, specs)
            assert found is not None and found.key == key, f"{example!r} -> {found and found.key}, not {key}"


def _ordered(key: str, peaks: dict[str, float], chain: tuple[str, ...]) -> None:
    present = [(d, peaks[d]) for d in chain if d in peaks]
    for (low_d, low), (high_d, high) in zip(present, present[1:]):
        assert low <= high, f"{key}: {low_d} {low} > {high_d} {high}"


@pytest.mark.parametrize("key", sorted(load_specs()))
def test_entry_is_sourced_and_consistent(key: str) -> None:
    spec = load_specs()[key]
    assert spec.sources and all(s.url.startswith(("https://", "http://")) and s.title for s in spec.sources)
    assert spec.vendor in ("NVIDIA", "AMD")
    assert spec.memory_bandwidth_gbs and spec.memory_bandwidth_gbs > 0
    assert spec.vector_tflops.get("fp32"), f"{key}: no vector fp32 peak"
    tensor = dict(spec.tensor_tflops)
    _ordered(key, tensor, ("tf32", "bf16", "fp8", "fp4"))
    _ordered(key, tensor, ("fp8", "fp6", "fp4"))
    if "bf16" in tensor and "fp16" in tensor:
        assert tensor["bf16"] == tensor["fp16"]
    for dtype in ("fp64", "fp32"):  # matrix units are never slower than vector units
        if dtype in tensor and dtype in spec.vector_tflops:
            assert tensor[dtype] >= spec.vector_tflops[dtype]
    assert spec.vector_tflops.get("fp64", 0) <= spec.vector_tflops["fp32"]
    # a peak the units could not reach: SMs/CUs x clock x the densest known rate per unit per clock
    if spec.sm_count and spec.boost_clock_mhz:
        per_unit_clock = max(tensor.values(), default=0) * 1e12 / (spec.sm_count * spec.boost_clock_mhz * 1e6)
        assert per_unit_clock <= 16384, f"{key}: {per_unit_clock:.0f} FLOP/clock/unit is not plausible"
    # the vector fp32 rate is whole FMA lanes per unit: 64 or 128 per SM/CU (x2 FLOP), give or take rounding
    if spec.sm_count and spec.boost_clock_mhz:
        lanes = spec.vector_tflops["fp32"] * 1e12 / (spec.sm_count * spec.boost_clock_mhz * 1e6) / 2
        assert min(abs(lanes - n) / n for n in (64, 128)) < 0.02, f"{key}: fp32 = {lanes:.1f} lanes per unit"
    if "halved" in spec.notes:  # a halved figure says it came from a sparse one
        assert "spars" in spec.notes.lower()


def test_peaks_units_and_helpers(tmp_path: Path) -> None:
    specs = load_specs()
    h100 = specs["h100_sxm"]
    assert peak_flops(h100, "c10::BFloat16") == pytest.approx(989.5e12)
    assert peak_flops(h100, "float", tensor=False) == pytest.approx(67e12)
    assert peak_flops(h100, "tf32") == pytest.approx(494.5e12)
    assert peak_flops(h100, "c10::Float8_e4m3fn") == pytest.approx(1979e12)
    assert peak_flops(h100, "fp4") is None  # Hopper has no FP4: missing, not zero
    assert peak_flops(h100, "complex<float>") is None
    assert ridge_point(h100, "bf16") == pytest.approx(989.5e12 / 3350e9)
    assert interconnect_bytes_per_s(h100) == pytest.approx(900e9)
    # per device: an MI250X package is two devices (figures given here, so they count as verified)
    user = tmp_path / "mi250x.toml"
    user.write_text("[gpus.mi250x]\nmemory_bandwidth_gbs = 3276.8\ntensor_tflops = { fp16 = 383 }\n")
    mi250x = load_specs(user)["mi250x"]
    assert peak_flops(mi250x, "fp16") == pytest.approx(383e12 / 2)
    assert memory_bandwidth_bytes_per_s(mi250x) == pytest.approx(3276.8e9 / 2)
    assert normalize_dtype("torch.float16") == "fp16" and normalize_dtype("Double") == "fp64"
    assert normalize_dtype("Float8_e5m2") == "fp8" and normalize_dtype("long int") is None


def test_missing_figures_are_said_not_guessed() -> None:
    specs = load_specs()
    assert missing_peak_reason("NVIDIA H100 80GB HBM3", specs["h100_sxm"], "bf16") is None
    assert "fp4" in (missing_peak_reason("NVIDIA H100 80GB HBM3", specs["h100_sxm"], "fp4") or "")
    assert "fp64" in (missing_peak_reason("Tesla T4", specs["t4"], "double", tensor=False) or "")
    reason = missing_peak_reason("Mystery GPU 9000", None, "bf16") or ""
    assert "unknown GPU" in reason and "Mystery GPU 9000" in reason


def test_unverified_figures_are_never_used() -> None:
    """A figure the table holds but no checked source confirms is withheld by every helper, and the
    reason says so; a verified one is returned. Checked over every entry and dtype of the built-in table."""
    withheld = used = 0
    for spec in load_specs().values():
        for table, tensor in (("tensor_tflops", True), ("vector_tflops", False)):
            for dtype, tflops in getattr(spec, table).items():
                peak = peak_flops(spec, dtype, tensor)
                if is_verified(spec, f"{table}.{dtype}"):
                    used += 1
                    assert peak == pytest.approx(tflops * 1e12 / spec.devices_per_package)
                else:
                    withheld += 1
                    assert peak is None and ridge_point(spec, dtype, tensor) is None
                    assert "not verified" in (missing_peak_reason(spec.name, spec, dtype, tensor) or ""), spec.key
        bandwidth = memory_bandwidth_bytes_per_s(spec)
        assert (bandwidth is not None) == is_verified(spec, "memory_bandwidth_gbs"), spec.key
        link = interconnect_bytes_per_s(spec)
        assert (link is not None) == is_verified(spec, "interconnect_gbs"), spec.key
    assert withheld and used  # both cases occur in the table as it stands


@pytest.mark.parametrize("key, figure", [
    # the figures last session's notes doubted: none may reach a report until a source is checked
    ("h20", "tensor_tflops.bf16"), ("h800_pcie", "vector_tflops.fp64"), ("b300", "tensor_tflops.fp4"),
    ("mi355x", "interconnect_gbs"), ("mi300x", "boost_clock_mhz"),
])
def test_doubtful_figures_are_unverified(key: str, figure: str) -> None:
    spec = load_specs()[key]
    assert figure in unverified_fields(spec) and not is_verified(spec, figure)


def test_a_verified_figure_has_a_fetched_source() -> None:
    for key, spec in load_specs().items():
        fetched = [s for s in spec.sources if not s.title.startswith("(unverified)")]
        assert bool(spec.verified) == bool(fetched), f"{key}: verified figures and fetched sources must go together"


def test_user_file_figures_count_as_verified(tmp_path: Path) -> None:
    user = tmp_path / "gpus.toml"
    user.write_text("[gpus.h20]\ntensor_tflops = { bf16 = 148 }\n")
    builtin, h20 = load_specs()["h20"], load_specs(user)["h20"]
    assert peak_flops(builtin, "bf16") is None
    assert peak_flops(h20, "bf16") == pytest.approx(148e12)  # the user's own figure
    assert peak_flops(h20, "fp8") is None  # figures the user did not give stay unverified
    assert "not verified" in (missing_peak_reason("NVIDIA H20", h20, "fp8") or "")
    accept = tmp_path / "accept.toml"  # a user may also accept a built-in figure as it stands
    accept.write_text("[gpus.h20]\nverified = [\"tensor_tflops.fp8\"]\n")
    assert peak_flops(load_specs(accept)["h20"], "fp8") == pytest.approx(builtin.tensor_tflops["fp8"] * 1e12)


def test_user_file_overrides_one_value_and_adds_a_gpu(tmp_path: Path) -> None:
    user = tmp_path / "gpus.toml"
    user.write_text(
        "[gpus.h100_sxm]\nmemory_bandwidth_gbs = 3000\ntensor_tflops = { bf16 = 900 }\n\n"
        "[gpus.lab_x1]\nname = \"Lab X1\"\nvendor = \"NVIDIA\"\narchitecture = \"Hopper\"\n"
        "match = ['Lab X1']\nmemory_bandwidth_gbs = 1000\nvector_tflops = { fp32 = 10 }\n"
        "tensor_tflops = { bf16 = 100 }\n")
    specs = load_specs(user)
    builtin = load_specs()
    h100 = specs["h100_sxm"]
    assert h100.memory_bandwidth_gbs == 3000 and h100.tensor_tflops["bf16"] == 900
    assert h100.tensor_tflops["fp8"] == builtin["h100_sxm"].tensor_tflops["fp8"]  # the rest is kept
    assert h100.origin == str(user)
    lab = match_gpu("Lab X1 (rev 2)", specs)
    assert lab is not None and lab.key == "lab_x1"
    assert ridge_point(lab, "bf16") == pytest.approx(100.0)
    assert builtin["h100_sxm"].memory_bandwidth_gbs == 3350  # the built-in table is untouched
    assert match_gpu("Lab X1") is None


@pytest.mark.parametrize("text, key", [
    ("[gpus.h100_sxm]\nmemory_bandwidth_gbs = \"fast\"\n", "gpus.h100_sxm.memory_bandwidth_gbs"),
    ("[gpus.h100_sxm]\nmemory_bandwidth_gbs = -1\n", "gpus.h100_sxm.memory_bandwidth_gbs"),
    ("[gpus.h100_sxm]\ntensor_tflops = { fp7 = 3 }\n", "gpus.h100_sxm.tensor_tflops.fp7"),
    ("[gpus.h100_sxm]\nbandwidth = 3\n", "gpus.h100_sxm.bandwidth"),
    ("[gpus.new]\nname = \"New\"\nvendor = \"AMD\"\narchitecture = \"x\"\n", "gpus.new.match"),
    ("[gpus.new]\nname = \"N\"\nvendor = \"AMD\"\narchitecture = \"x\"\nmatch = ['(']\n", "gpus.new.match"),
    ("[gpus.h100_sxm]\nsm_count = 1.5\n", "gpus.h100_sxm.sm_count"),
    ("[gpu.h100_sxm]\nsm_count = 1\n", "gpu"),
    ("[gpus.h100_sxm\n", "not valid TOML"),
    ("[gpus.h100_sxm]\nverified = [\"tensor_tflops.fp4\"]\n", "gpus.h100_sxm.verified"),
    ("[gpus.h100_sxm]\nverified = \"all\"\n", "gpus.h100_sxm.verified"),
])
def test_bad_user_file_gives_one_line_naming_file_and_key(tmp_path: Path, text: str, key: str) -> None:
    user = tmp_path / "bad.toml"
    user.write_text(text)
    with pytest.raises(TraceviewError) as info:
        load_specs(user)
    message = str(info.value)
    assert "\n" not in message and message.startswith(str(user)) and key in message


def test_missing_user_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(TraceviewError, match="no such file"):
        load_specs(tmp_path / "absent.toml")


def test_specs_are_typed_records() -> None:
    spec = load_specs()["mi300x"]
    assert isinstance(spec, GpuSpec) and spec.sm_count == 304
    assert set(spec.tensor_tflops) <= set(DTYPES)


def test_docs_list_every_table_entry() -> None:
    text = (REPO / "docs" / "metrics.md").read_text()
    section = text.split("## Hardware peaks", 1)[1].split("\n## ", 1)[0]
    missing = [key for key in load_specs() if f"`{key}`" not in section]
    assert not missing, f"docs/metrics.md 'Hardware peaks' does not list {missing}"
