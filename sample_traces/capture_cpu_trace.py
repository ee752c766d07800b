"""Capture a real CPU-only PyTorch profiler trace of a tiny MLP training loop.

``main(out_dir)`` profiles a small training loop with ``torch.profiler`` (CPU activity only,
``record_shapes=True``, ``with_stack=False``) under ``schedule(wait=1, warmup=1, active=3)``, so
the trace holds ``ProfilerStep#2..#4``. ``export_chrome_trace`` writes ``out_dir/torch_cpu_mlp.json``;
the text is then scrubbed of anything that identifies the machine or the person (host name, user
name, home and working directories, absolute paths, environment), gzipped with mtime 0 to
``out_dir/torch_cpu_mlp.json.gz``, and the raw export is removed.

Needs torch (optional for the project). A re-capture is *not* byte-identical: timings, pids and the
trace id differ on every run.
"""

from __future__ import annotations

import argparse
import getpass
import gzip
import json
import os
import pathlib
import socket
import sys
import tempfile

OUT_NAME = "torch_cpu_mlp.json"
MAX_GZ_BYTES = 500_000
#: top-level keys kept in the committed file; anything else (metadata, logs, user names) is dropped
KEEP_TOP_LEVEL = (
    "schemaVersion", "deviceProperties", "distributedInfo", "record_shapes", "with_stack", "with_flops",
    "with_modules", "profile_memory", "trace_id", "traceEvents", "traceName", "displayTimeUnit",
    "baseTimeNanoseconds",
)


def run_loop(steps: int = 5) -> "object":
    """Profile ``steps`` iterations of a tiny MLP; returns the finished profiler."""
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(steps * 16, 32), torch.randint(0, 8, (steps * 16,)))
    loader = DataLoader(data, batch_size=16, shuffle=False, num_workers=0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=3),
                 record_shapes=True, with_stack=False) as prof:
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            prof.step()
    return prof


def _sensitive_strings(raw_path: pathlib.Path) -> list[tuple[str, str]]:
    """(value, replacement) pairs, longest first, for everything that could identify the capture."""
    pairs: dict[str, str] = {str(raw_path): OUT_NAME, str(raw_path.resolve()): OUT_NAME}
    dirs = {
        str(raw_path.parent): ".", str(raw_path.resolve().parent): ".",
        os.getcwd(): ".", str(pathlib.Path.home()): "~", tempfile.gettempdir(): "<tmp>",
        sys.prefix: "<python>", sys.base_prefix: "<python>", sys.exec_prefix: "<python>",
    }
    for d, rep in dirs.items():
        if d and d not in ("/", "."):
            pairs.setdefault(d, rep)
    for name, rep in ((socket.gethostname(), "<host>"), (socket.getfqdn(), "<host>"), (_user(), "<user>")):
        if name and len(name) >= 3 and name not in ("localhost", "root"):
            pairs.setdefault(name, rep)
    return sorted(pairs.items(), key=lambda kv: -len(kv[0]))


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no user database entry in some containers
        return os.environ.get("USER", "")


def scrub(text: str, raw_path: pathlib.Path) -> str:
    """Remove identifying data from the exported text, keeping Kineto's own formatting."""
    doc = json.loads(text)
    # 1. drop top-level keys that are not trace data (PyTorch may add metadata, logs, env)
    for key in [k for k in doc if k not in KEEP_TOP_LEVEL]:
        text = _drop_top_level_key(text, key)
    # 2. the trace name is the absolute export path
    if "traceName" in doc:
        old = json.dumps(doc["traceName"])
        text = text.replace(f'"traceName": {old}', f'"traceName": {json.dumps(OUT_NAME)}')
    # 3. host and user names as whole string values (however short), then any occurrence of a
    #    path, host or user name inside strings
    for name, rep in ((socket.gethostname(), "<host>"), (socket.getfqdn(), "<host>"), (_user(), "<user>")):
        if name:
            text = text.replace(json.dumps(name), json.dumps(rep))
    for value, rep in _sensitive_strings(raw_path):
        for form in {value, json.dumps(value)[1:-1]}:
            text = text.replace(form, rep)
    check = json.loads(text)
    leftovers = [v for v, _ in _sensitive_strings(raw_path) if v in text]
    if leftovers or check.get("traceName", OUT_NAME) != OUT_NAME:
        raise RuntimeError(f"scrubbing failed, still present: {leftovers}")
    return text


def _drop_top_level_key(text: str, key: str) -> str:
    """Remove ``"key": value`` at the top level by re-serialising only that member."""
    needle = f'"{key}":'
    start = text.find(needle)
    if start < 0:
        return text
    # find the value's end with a JSON decoder starting after the colon
    dec = json.JSONDecoder()
    pos = start + len(needle)
    while text[pos] in " \t\r\n":
        pos += 1
    _, end = dec.raw_decode(text, pos)
    # swallow the following comma (or the preceding one for the last member)
    tail = end
    while tail < len(text) and text[tail] in " \t\r\n":
        tail += 1
    if tail < len(text) and text[tail] == ",":
        nxt = tail + 1
        while nxt < len(text) and text[nxt] in " \t\r\n":
            nxt += 1
        return text[:start] + text[nxt:]
    head = start
    while head > 0 and text[head - 1] in " \t\r\n":
        head -= 1
    if text[head - 1] == ",":
        head -= 1
    return text[:head] + text[end:]


def main(out_dir: pathlib.Path) -> pathlib.Path:
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / OUT_NAME
    prof = run_loop()
    prof.export_chrome_trace(str(raw))
    try:
        text = scrub(raw.read_text(encoding="utf-8"), raw)
    finally:
        raw.unlink(missing_ok=True)
    data = gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0)
    if len(data) > MAX_GZ_BYTES:
        raise RuntimeError(f"{OUT_NAME}.gz is {len(data)} bytes (limit {MAX_GZ_BYTES}): shrink the loop")
    gz = out_dir / (OUT_NAME + ".gz")
    gz.write_bytes(data)
    return gz


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent,
                    help="directory that receives torch_cpu_mlp.json.gz (default: this script's directory)")
    print(main(ap.parse_args().out))
