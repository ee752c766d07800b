"""Regenerate every trace in sample_traces/: ``python sample_traces/regenerate.py``.

1. synthetic Kineto job (make_kineto.py)      -> synthetic_4rank/rank{0..3}.json.gz, truth.json
2. synthetic Nsight Systems export (make_nsys.py) -> whatever make_nsys.main writes
2b. before/after regression pair (make_pair.py) -> regression_pair/{base,new}/rank{0,1}.json.gz, truth.json
2c. efficiency known answer (make_efficiency.py) -> efficiency_roofline.{json.gz,truth.json,gpus.toml}
2d. graph capture + replay pairs (make_graph_pair.py) -> graph_pair/{hip,cuda,cuda_nodes}/{capture,replay}.json.gz
3. real CPU-only torch.profiler capture (capture_cpu_trace.py) -> torch_cpu_mlp.json.gz,
   skipped (keeping the committed file) when torch is not installed.

Steps 1 and 2 are deterministic (byte-identical output); step 3 is not (real timings).
Exits non-zero if a step fails or make_nsys.py is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import sys
import traceback
from types import ModuleType

HERE = pathlib.Path(__file__).resolve().parent


def load(name: str) -> ModuleType:
    """Import ``sample_traces/<name>.py`` by file path (sample_traces is not a package)."""
    path = HERE / f"{name}.py"
    if not path.is_file():
        raise FileNotFoundError(path)
    spec = importlib.util.spec_from_file_location(f"sample_traces_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Regenerate the traces in sample_traces/.")
    ap.add_argument("--out", type=pathlib.Path, default=HERE, help="output directory (default: sample_traces/)")
    ap.add_argument("--skip-capture", action="store_true", help="do not re-capture the torch CPU trace")
    args = ap.parse_args(argv)
    out: pathlib.Path = args.out
    failures: list[str] = []

    print("[1/3] synthetic Kineto job: make_kineto.main")
    try:
        load("make_kineto").main(out)
        print(f"      wrote {out / 'synthetic_4rank'}")
    except Exception:  # noqa: BLE001 - report and go on with the other steps
        traceback.print_exc()
        failures.append("make_kineto.py failed")

    print("[2/3] synthetic Nsight Systems export: make_nsys.main")
    if not (HERE / "make_nsys.py").is_file():
        msg = f"make_nsys.py is missing ({HERE / 'make_nsys.py'}): cannot regenerate the Nsight sample"
        print(f"      ERROR: {msg}")
        failures.append(msg)
    else:
        try:
            load("make_nsys").main(out)
            print("      done")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failures.append("make_nsys.py failed")

    print("[2b] before/after regression pair: make_pair.main")
    try:
        print(f"      wrote {load('make_pair').main(out)}")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        failures.append("make_pair.py failed")

    print("[2c] efficiency known-answer sample: make_efficiency.main")
    try:
        print(f"      wrote {load('make_efficiency').main(out)}")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        failures.append("make_efficiency.py failed")

    print("[2d] graph capture and replay pairs: make_graph_pair.write")
    try:
        load("make_graph_pair").write(out / "graph_pair")
        print(f"      wrote {out / 'graph_pair'}")
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        failures.append("make_graph_pair.py failed")

    print("[3/3] CPU-only torch.profiler capture: capture_cpu_trace.main")
    if args.skip_capture:
        print("      skipped (--skip-capture); keeping the committed torch_cpu_mlp.json.gz")
    elif importlib.util.find_spec("torch") is None:
        print("      skipped: torch is not installed (optional: pip install 'traceview[torch]'); "
              "keeping the committed torch_cpu_mlp.json.gz")
    else:
        try:
            gz = load("capture_cpu_trace").main(out)
            print(f"      wrote {gz} (a re-capture is not byte-identical: real timings)")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failures.append("capture_cpu_trace.py failed")

    if failures:
        print("FAILED: " + "; ".join(failures), file=sys.stderr)
        return 1
    print("all sample traces regenerated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
