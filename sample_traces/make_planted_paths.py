"""Kineto traces with a planted, known critical path and known what-if step times (issue 27).

Each case is a short multi-step job whose schedule this module places itself (with
``make_planted.RankTrace``), so the critical path of every step is known by construction: the case
records the path's segments while it places the events (host time between two points, a launch
latency, a kernel's duration, the turnaround between two kernels on a stream, a wait on another
stream, a sync's return lag, waiting on another rank), and the truth is summed from those records
(never by running traceview). Categories, edges and what-if scenarios are those of the
``critical_path`` analysis's contract (docs/metrics.md, "Critical path"):

* ``host_bound_loop``: a GEMM with a few tiny kernels queued behind it, then tiny kernels launched
  slower than they run; no sync, so the path is the host thread: host_compute + launch_overhead;
* ``second_stream_wait``: a slow chain of kernels on a second stream joined back by
  ``cudaStreamWaitEvent`` before a kernel on the main stream, then ``cudaDeviceSynchronize``: the
  path runs through the second stream's chain;
* ``item_sync``: ``.item()`` (``aten::item`` -> ``aten::_local_scalar_dense`` -> ``cudaMemcpyAsync``
  DtoH + ``cudaStreamSynchronize``) mid-step after a long GPU queue: host -> the queue it drained ->
  sync -> host;
* ``late_rank_allreduce``: 4 ranks, three exposed all-reduce buckets on the NCCL stream after the
  compute, the host syncs at step end; rank 2's compute is longer, so it reaches the first bucket
  late by a planted time per step, which is waiting_on_rank on the other ranks' paths;
* ``graph_replay``: one ``cudaGraphLaunch`` per step -> many kernels sharing its correlation id,
  GPU-bound, synced at step end: the path is the replay's kernels.

What-if truth: the same schedule is placed again with the scenario's costs set to zero (the
``no_host_overhead`` host: every op, call, gap, launch latency and sync return lag; the
``comm_overlapped`` collectives: every collective kernel's duration; ``achievable``: both), by the
same placement rules (a kernel starts at max(its stream's previous end + turnaround, its call's end
+ launch latency, the end of what it waits for + the wait's lag); a sync returns after what it
drains + its return lag), which are the model's edges with its binding and nominal lags; the
step's completion c_w = max(step end, end of the step's activities) then gives the what-if step
c'_w - c'_{w-1} and whatif_ns = step_ns - saving_ns as the contract defines. ``median_rank``: the
rank's on-path waiting beyond each collective's median arrival, subtracted. ``roofline``: no op of
these traces has shapes, so nothing is modelled and the step is unchanged.

Placement is checked while it runs, so that the spec's choices are unambiguous here: at every GPU
activity the binding edge (the latest source) is later than every other source by ``MARGIN_NS``
and what it allows is later than what the others allow by as much; more than half of every
stream's stream-order edges bind with the same turnaround (so the stream's median turnaround, the
nominal lag of a non-binding stream edge, is that turnaround whichever edges the median is taken
over); a wait-event join starts after the last activity of the other stream; a sync drains the
activity it waits for; runtime calls that are neither launches nor syncs (``cudaEventRecord``,
``cudaStreamWaitEvent``) never lie on a path; a step annotation owns at most ~1 us of its step, and
steps are 400 ns apart (so the readings of the spec that differ on those, a step range's own time
as untraced or an inter-step gap in a what-if, differ by less than the tolerance). The own time of
other annotations (``Optimizer.step#SGD.step``, ``vllm:execute_model``) is ``ANNOTATION_CATEGORY``,
host_compute (host work the annotation names), a step range's own ``STEP_CATEGORY``, host_untraced
(docs/metrics.md). As a script:
``python sample_traces/make_planted_paths.py OUT_DIR`` writes the traces and ``truth.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import statistics
import sys
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterator, Sequence

_HERE = pathlib.Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))

import make_planted as mp  # noqa: E402  (RankTrace, kernel tables, writer)

CATEGORIES = ("host_compute", "host_untraced", "launch_overhead", "sync", "gpu_compute", "memory",
              "communication", "gpu_wait", "waiting_on_rank")
GROUPS = {"host": ("host_compute", "host_untraced", "launch_overhead", "sync"),
          "gpu": ("gpu_compute", "memory", "gpu_wait"),
          "communication": ("communication", "waiting_on_rank")}
SCENARIOS = ("comm_overlapped", "no_host_overhead", "roofline", "median_rank", "achievable")

TURNAROUND_NS = 1_000  # the gap between back-to-back activities of one stream
LAUNCH_LATENCY_NS = 2_500  # a launch call's return -> its activity's start, on an idle stream
WAIT_LAG_NS = 1_500  # the other stream's last activity end -> the waiting activity's start
MARGIN_NS = 2_000  # the binding source of a point is later than every other source by this much
STEP_GAP_NS = 400  # untraced host time between one step's end and the next one's start
SIDE_STREAM = 13
COMPUTE_STREAM = mp.COMPUTE_STREAM
COMM_STREAM = mp.COMM_STREAM
LATE_RANK = 2
#: found vs planted: within 1% of the planted value, or of FLOOR_SHARE of the step for small ones
TOLERANCE = 0.01
FLOOR_SHARE = 0.0025

LAUNCH_CALLS = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaGraphLaunch"})
SYNC_CALLS = frozenset({"cudaStreamSynchronize", "cudaDeviceSynchronize"})
#: what an annotation's own time (no op open inside it) is: host work it names; a step's own range:
#: the program's untraced host time (docs/metrics.md, "Critical path and what-if")
ANNOTATION_CATEGORY = "host_compute"
STEP_CATEGORY = "host_untraced"
CLASS_CATEGORY = {"compute": "gpu_compute", "memory": "memory", "communication": "communication"}
CBID = mp.CBID


@dataclass(frozen=True)
class Scenario:
    host: int = 1  # 0: the host is infinitely fast (no_host_overhead)
    comm: int = 1  # 0: collective kernels last 0 (comm_overlapped)


MEASURED = Scenario()
REPLACED = {"comm_overlapped": Scenario(comm=0), "no_host_overhead": Scenario(host=0),
            "achievable": Scenario(host=0, comm=0)}


@dataclass
class Act:
    """One GPU activity as placed: times, stream, class, the call that launched it, its step, and
    which incoming edge binds its start ("launch", "stream" or "wait")."""

    start: int
    end: int
    stream: int
    cls: str
    call: mp.Call
    step: int
    binding: str


@dataclass
class StepTruth:
    rank: int
    step: int
    start_ns: int
    end_ns: int
    step_ns: int
    composition: dict[str, int]
    bound_by: str
    bound_share: float
    whatif: dict[str, int]
    segments: list[tuple[int, int, str]] = field(default_factory=list)  # (start, end, category), in time


@dataclass
class PathCase:
    name: str
    traces: dict[int, dict[str, Any]]
    truth: list[StepTruth]


# ----------------------------------------------------------------------------------------------
# One rank, placed under a scenario


class PathRank(mp.RankTrace):
    """A RankTrace on one clock for every rank, whose host costs and collective durations follow a
    scenario, and which records the GPU activities, host events and each step's path."""

    def __init__(self, rank: int, world: int, rng: random.Random, scenario: Scenario) -> None:
        super().__init__(rank, world, rng)
        self.scenario = scenario
        self.host = mp.T0_NS + 20_000  # every rank on the same clock: the late rank's lateness is exact
        self.acts: list[Act] = []
        self.last: dict[int, Act] = {}
        self.host_events: list[tuple[int, int, str]] = []  # (start, end, category) of spans
        self.calls: list[tuple[mp.Call, str]] = []
        self.windows: dict[int, tuple[int, int]] = {}
        self.paths: dict[int, list[tuple[int, int, str]]] = {}
        self.collectives: dict[int, list[tuple[Act, list[int]]]] = {}  # step -> (act, every rank's arrival)
        self.step_no = 0

    def h(self, ns: int) -> int:
        """A host cost in this scenario."""
        return ns * self.scenario.host

    @property
    def measured(self) -> bool:
        return self.scenario == MEASURED

    # -- host ----------------------------------------------------------------------------------
    @contextmanager
    def span(self, cat: str, name: str, pre: tuple[int, int] = (2_000, 3_000),
             post: tuple[int, int] = (600, 1_500), args: dict[str, Any] | None = None) -> Iterator[None]:
        self.ext += 1
        start = self.host
        self.stack.append((cat, name, start, self.ext, dict(args or {})))
        self.host += self.h(self.r(*pre))
        yield
        self.host += self.h(self.r(*post))
        cat, name, start, ext, a = self.stack.pop()
        ev_args = {"External id": ext, "Record function id": 0, **a} if cat != "python_function" else a
        self.events.append(self._x(cat, name, self.pid, self.tid, start, self.host - start, ev_args))
        if cat in ("cpu_op", "user_annotation"):
            own = "host_compute" if cat == "cpu_op" else ANNOTATION_CATEGORY
            self.host_events.append((start, self.host, STEP_CATEGORY if name.startswith("ProfilerStep#") else own))

    def call(self, api: str, dur: int) -> mp.Call:
        self.corr += 1 + (2 if self.rng.random() < 0.2 else 0)
        ext = next((s[3] for s in reversed(self.stack) if s[0] in ("cpu_op", "user_annotation")), 0)
        start, dur = self.host, self.h(dur)
        event = self._x("cuda_runtime", api, self.pid, self.tid, start, dur,
                        {"External id": ext, "cbid": CBID[api], "correlation": self.corr})
        self.events.append(event)
        self.host = start + dur + self.h(self.r(300, 900))
        c = mp.Call(start, start + dur, self.corr, ext, event)
        self.calls.append((c, api))
        return c

    def nest(self, ops: Sequence[str], body: Callable[[], Act], pre: tuple[int, int] = (1_500, 3_000),
             post: tuple[int, int] = (600, 1_500)) -> Act:
        if not ops:
            return body()
        with self.span("cpu_op", ops[0], pre=pre, post=post):
            return self.nest(ops[1:], body, pre, post)

    def sync(self, api: str, drained: Act) -> mp.Call:
        """A synchronising call at the cursor: it returns a return lag after ``drained`` ends."""
        c = self.call(api, self.r(1_000, 2_000))
        end = max(c.end, drained.end + self.h(self.r(2_000, 4_000)))
        if self.measured:
            assert drained.end > c.start + MARGIN_NS, "the sync has nothing to wait for: its own time binds"
            launched = [a for a in self.acts if a.call.start < c.start and a.end < end]
            assert max(launched, key=lambda a: a.end) is drained, "the sync drains another activity"
        c.end = end
        c.event["dur"] = mp._us(end - c.start)
        self.host = end + self.h(self.r(100, 300))
        return c

    @contextmanager
    def step(self, n: int) -> Iterator[None]:
        """A ProfilerStep whose own time is ~1 us (see the module doc), after a short untraced gap."""
        if n > 1:
            self.work(self.h(STEP_GAP_NS))
        start = self.host
        self.step_no = n
        with self.span("user_annotation", f"ProfilerStep#{n}", pre=(100, 300), post=(100, 200)):
            yield
        self.windows[n] = (start, self.host)
        self.steps += 1
        self.step_no = 0

    # -- GPU -----------------------------------------------------------------------------------
    def plan(self, stream: int, c: mp.Call, wait_for: Act | None = None) -> tuple[int, str]:
        """When an activity launched by ``c`` on ``stream`` starts, and which edge binds."""
        prev = self.last.get(stream)
        allows = {"launch": c.end + self.h(LAUNCH_LATENCY_NS)}
        sources = {"launch": c.start}
        if prev is not None:
            allows["stream"], sources["stream"] = prev.end + TURNAROUND_NS, prev.end
        if wait_for is not None:
            allows["wait"], sources["wait"] = wait_for.end + WAIT_LAG_NS, wait_for.end
        binding = max(allows, key=lambda k: allows[k])
        if self.measured:
            for k in allows:
                assert k == binding or (allows[binding] - allows[k] >= MARGIN_NS
                                        and sources[binding] - sources[k] >= MARGIN_NS), \
                    f"rank {self.rank} step {self.step_no}: {binding} vs {k} binding is ambiguous"
        return allows[binding], binding

    def put(self, cat: str, name: str, stream: int, c: mp.Call, start: int, dur: int, binding: str,
            cls: str = "compute", args: dict[str, Any] | None = None) -> Act:
        self.place(cat, name, stream, start, dur, c, cls, args)
        act = Act(start, start + dur, stream, cls, c, self.step_no, binding)
        self.acts.append(act)
        self.last[stream] = act
        return act

    def gpu(self, name: str, stream: int, c: mp.Call, dur: int, *, cat: str = "kernel", cls: str = "compute",
            wait_for: Act | None = None, args: dict[str, Any] | None = None) -> Act:
        start, binding = self.plan(stream, c, wait_for)
        if self.measured and binding == "wait":
            assert wait_for is not None
            others = [a for a in self.acts if a.stream != stream and a.end < start]
            assert max(others, key=lambda a: a.end) is wait_for, "the join waits for another activity"
        geometry = {"grid": [132, 4, 1], "block": [256, 1, 1], "registers per thread": 128} if cat == "kernel" else {}
        return self.put(cat, name, stream, c, start, dur, binding, cls, {**geometry, **(args or {})})

    def kernel_op(self, ops: Sequence[str], name: str, dur: int, stream: int = COMPUTE_STREAM,
                  wait_for: Act | None = None, pre: tuple[int, int] = (1_500, 3_000),
                  post: tuple[int, int] = (600, 1_500)) -> Act:
        """Nested CPU ops around one ``cudaLaunchKernel`` of ``name`` on ``stream``."""
        def body() -> Act:
            c = self.call("cudaLaunchKernel", self.r(4_800, 6_800))
            self.flow_start(c)
            return self.gpu(name, stream, c, dur, wait_for=wait_for)
        return self.nest(ops, body, pre, post)

    # -- the path ------------------------------------------------------------------------------
    def path(self) -> list[tuple[int, int, str]]:
        return self.paths.setdefault(self.step_no, [])

    def on_path_host(self, a: int, b: int) -> None:
        """Host thread time on the path (categorised from the host events once the step is placed)."""
        self.path().append((a, b, "host"))

    def on_path_launch(self, act: Act) -> None:
        assert act.binding == "launch" or not self.measured, "a launch edge that does not bind"
        self.path().append((act.call.start, act.start, "launch_overhead"))

    def on_path_chain(self, acts: Sequence[Act]) -> None:
        """Activities each bound to the previous one (stream order or a wait), durations and lags."""
        waits = {id(act): max(arrivals) - act.start for act, arrivals in self.collectives.get(self.step_no, [])}
        for prev, act in zip([None, *acts], acts):
            if prev is not None:
                assert act.binding in ("stream", "wait") or not self.measured, "a chain link that does not bind"
                self.path().append((prev.end, act.start, "gpu_wait"))
            wait = min(waits.get(id(act), 0), act.end - act.start)
            if wait > 0:  # a collective waits for its last participant, then communicates
                self.path().append((act.start, act.start + wait, "waiting_on_rank"))
            self.path().append((act.start + wait, act.end, CLASS_CATEGORY[act.cls]))

    def cpu_only(self, name: str, ns: tuple[int, int]) -> None:
        """A CPU op that launches nothing (host work, e.g. a copy between CPU tensors)."""
        with self.span("cpu_op", name, pre=ns):
            pass

    def on_path_sync(self, drained: Act, c: mp.Call) -> None:
        self.path().append((drained.end, c.end, "sync"))


# ----------------------------------------------------------------------------------------------
# The cases: each places `steps` steps on every rank and records each step's path


FWD_BWD = [(ops, mp._k(key)[0]) for ops, key in mp.FORWARD + mp.BACKWARD]


def case_host_bound_loop(rng: random.Random, steps: int, scenario: Scenario) -> list[PathRank]:
    """A GEMM, 14 tiny kernels queued behind it (so most stream edges bind with the turnaround),
    a CPU-only op while the queue drains, then 10 tiny kernels each launched after the last ended."""
    r = PathRank(0, 1, rng, scenario)
    for n in range(1, steps + 1):
        with r.step(n):
            with r.span("user_annotation", "Optimizer.step#SGD.step", pre=(1_000, 2_000), post=(500, 1_000)):
                r.kernel_op(("aten::mm",), mp.gen_kineto.GEMM_NN, r.r(360_000, 380_000))
                for i in range(24):
                    if i == 14:  # a host-side copy of CPU tensors: longer than the queue takes to drain
                        r.cpu_only("aten::copy_", (300_000, 320_000))
                    op, key = mp.TINY_OPS[i % len(mp.TINY_OPS)]
                    r.kernel_op((op,), mp._k(key)[0], r.r(2_000, 4_000), pre=(6_000, 10_000), post=(3_000, 5_000))
                r.cpu_only("aten::zero_", (10_000, 14_000))  # the last kernel ends before the step does
        start, end = r.windows[n]
        r.paths[n] = [(start, end, "host")]  # no sync: the step's end waits for the host alone
        assert all(a.end < end for a in r.acts if a.step == n) or not r.measured, "a kernel outlives its step"
    return [r]


def case_second_stream_wait(rng: random.Random, steps: int, scenario: Scenario) -> list[PathRank]:
    """Five slow kernels on a side stream and six on the main stream, the main stream joined to the
    side one (``cudaEventRecord`` + ``cudaStreamWaitEvent``) before a last kernel, then a sync."""
    r = PathRank(0, 1, rng, scenario)
    side_ops = ("aten::conv2d", "aten::convolution", "aten::cudnn_convolution")
    for n in range(1, steps + 1):
        with r.step(n):
            side = [r.kernel_op(side_ops, mp.gen_kineto.GEMM_TN, r.r(100_000, 140_000), stream=SIDE_STREAM)
                    for _ in range(5)]
            main = [r.kernel_op(ops, name, r.r(40_000, 60_000)) for ops, name in FWD_BWD[:6]]
            r.call("cudaEventRecord", r.r(2_000, 3_000))
            r.call("cudaStreamWaitEvent", r.r(1_500, 2_500))
            join = r.kernel_op(("aten::add",), mp._k("add")[0], r.r(15_000, 25_000), wait_for=side[-1])
            c = r.sync("cudaDeviceSynchronize", join)
        start, end = r.windows[n]
        assert main[-1].end + TURNAROUND_NS + MARGIN_NS < join.start or not r.measured, "the main stream binds"
        r.paths[n] = []
        r.step_no = n
        r.on_path_host(start, side[0].call.start)
        r.on_path_launch(side[0])
        r.on_path_chain([*side, join])
        r.on_path_sync(join, c)
        r.on_path_host(c.end, end)
        r.step_no = 0
    return [r]


def _item(r: PathRank) -> tuple[Act, mp.Call]:
    """``loss.item()``: a 4-byte DtoH copy queued after the work so far, and the sync on it."""
    with r.span("cpu_op", "aten::item"), r.span("cpu_op", "aten::_local_scalar_dense"):
        c = r.call("cudaMemcpyAsync", r.r(6_000, 9_000))
        r.flow_start(c)
        copy = r.gpu(mp.MEMCPY_DTOH_PAGEABLE, COMPUTE_STREAM, c, r.r(1_300, 2_200), cat="gpu_memcpy", cls="memory",
                     args={"bytes": 4})
        return copy, r.sync("cudaStreamSynchronize", copy)


def case_item_sync(rng: random.Random, steps: int, scenario: Scenario) -> list[PathRank]:
    """Ten forward kernels queued, ``.item()`` drains them, then three tiny launch-bound kernels."""
    r = PathRank(0, 1, rng, scenario)
    for n in range(1, steps + 1):
        with r.step(n):
            queue = [r.kernel_op(ops, name, r.r(30_000, 60_000)) for ops, name in (FWD_BWD * 2)[:10]]
            copy, sync = _item(r)
            for op, key in mp.TINY_OPS[:3]:
                r.kernel_op((op,), mp._k(key)[0], r.r(2_000, 4_000), pre=(10_000, 12_000), post=(1_000, 2_000))
            r.cpu_only("aten::zero_", (10_000, 14_000))  # the last kernel ends before the step does
        start, end = r.windows[n]
        r.step_no = n
        r.on_path_host(start, queue[0].call.start)
        r.on_path_launch(queue[0])
        r.on_path_chain([*queue, copy])
        r.on_path_sync(copy, sync)
        r.on_path_host(sync.end, end)
        r.step_no = 0
        assert all(a.end < end for a in r.acts if a.step == n) or not r.measured, "a kernel outlives its step"
    return [r]


def _bucket(r: PathRank, first: bool) -> mp.Call:
    """One DDP bucket's host side: record_param_comms (+ the comm stream's wait on the compute one)."""
    args = dict(mp.make_kineto.collective_args(4_234_752))
    with r.span("user_annotation", "nccl:all_reduce"), r.span("cpu_op", "record_param_comms", args=args):
        if first:
            r.call("cudaEventRecord", r.r(2_000, 3_000))
            r.call("cudaStreamWaitEvent", r.r(1_500, 2_500))
        c = r.call("cudaLaunchKernel", r.r(6_000, 9_000))
        r.flow_start(c)
    return c


def _nccl_args() -> dict[str, Any]:
    return {"grid": [16, 1, 1], "block": [640, 1, 1], **dict(mp.make_kineto.collective_args(4_234_752))}


def _all_reduce(ranks: list[PathRank], computed: list[Act], calls: list[mp.Call], dur: int) -> list[Act]:
    """The first bucket on every rank: each starts when its rank's compute is done (the wait) and
    all end together ``dur`` after the last arrival (nothing on the ranks' GPUs until then)."""
    planned = [r.plan(COMM_STREAM, c, wait_for=k) for r, c, k in zip(ranks, calls, computed)]
    last = max(start for start, _ in planned)
    acts = []
    for r, c, k, (start, binding) in zip(ranks, calls, computed, planned):
        if r.measured:
            assert binding == "wait", "the first bucket does not wait for the compute"
            others = [a for a in r.acts if a.stream != COMM_STREAM and a.end < start]
            assert max(others, key=lambda a: a.end) is k, "the first bucket waits for another activity"
        length = (last + dur - start) * r.scenario.comm
        acts.append(r.put("kernel", mp.make_kineto.NCCL_KERNEL, COMM_STREAM, c, start, length, binding,
                          "communication", _nccl_args()))
    return acts


def _late_step(ranks: list[PathRank], rng: random.Random) -> list[tuple[list[Act], list[Act], mp.Call]]:
    """One step of every rank: 12 compute kernels queued, three buckets, the sync on the last."""
    lateness, durs = rng.randint(40_000, 80_000), [rng.randint(80_000, 120_000) for _ in range(3)]
    queues, calls = [], []
    for r in ranks:
        queue = [r.kernel_op(ops, name, r.r(40_000, 70_000) + (lateness if r.rank == LATE_RANK and i == 11 else 0))
                 for i, (ops, name) in enumerate(FWD_BWD[:11] + FWD_BWD[5:6])]
        queues.append(queue)
        calls.append(_bucket(r, first=True))
    buckets = [[b] for b in _all_reduce(ranks, [q[-1] for q in queues], calls, durs[0])]
    for d in durs[1:]:  # queued behind the first: every rank starts them together
        for r, bs in zip(ranks, buckets):
            bs.append(r.gpu(mp.make_kineto.NCCL_KERNEL, COMM_STREAM, _bucket(r, first=False), d * r.scenario.comm,
                            cls="communication", args=_nccl_args()))
    for r, bs in zip(ranks, buckets):
        r.collectives[r.step_no] = [(b, [other[j].start for other in buckets]) for j, b in enumerate(bs)]
    return [(q, bs, r.sync("cudaStreamSynchronize", bs[-1])) for r, q, bs in zip(ranks, queues, buckets)]


def case_late_rank_allreduce(rng: random.Random, steps: int, scenario: Scenario) -> list[PathRank]:
    """4 ranks on one schedule (the same draws); rank 2's last backward kernel is longer by a planted
    lateness per step, so it reaches the first bucket that much after the others."""
    seed = rng.random()
    ranks = [PathRank(rank, 4, random.Random(seed), scenario) for rank in range(4)]
    for n in range(1, steps + 1):
        with ExitStack() as open_steps:
            for r in ranks:
                open_steps.enter_context(r.step(n))
            placed = _late_step(ranks, rng)
        for r, (queue, buckets, c) in zip(ranks, placed):
            start, end = r.windows[n]
            r.step_no = n
            r.on_path_host(start, queue[0].call.start)
            r.on_path_launch(queue[0])
            r.on_path_chain([*queue, *buckets])
            r.on_path_sync(buckets[-1], c)
            r.on_path_host(c.end, end)
            r.step_no = 0
    return ranks


def case_graph_replay(rng: random.Random, steps: int, scenario: Scenario) -> list[PathRank]:
    """Decode steps: one ``cudaGraphLaunch`` whose 36 kernels run back to back, then a sync."""
    r = PathRank(0, 1, rng, scenario)
    for n in range(1, steps + 1):
        with r.step(n):
            with r.span("user_annotation", "vllm:execute_model", pre=(3_000, 5_000), post=(500, 1_000)):
                c = r.call("cudaGraphLaunch", r.r(9_000, 16_000))
                r.flow_start(c)
                replay = []
                for i in range(36):
                    name, lo, hi = mp.GRAPH_LAYER[i % len(mp.GRAPH_LAYER)]
                    replay.append(r.gpu(name, COMPUTE_STREAM, c, r.r(lo, hi), args={"graph node id": 1_000 + i}))
                sync = r.sync("cudaDeviceSynchronize", replay[-1])
        start, end = r.windows[n]
        r.step_no = n
        r.on_path_host(start, c.start)
        r.on_path_launch(replay[0])
        r.on_path_chain(replay)
        r.on_path_sync(replay[-1], sync)
        r.on_path_host(sync.end, end)
        r.step_no = 0
    return [r]


Builder = Callable[[random.Random, int, Scenario], list[PathRank]]
CASES: dict[str, Builder] = {
    "host_bound_loop": case_host_bound_loop,
    "second_stream_wait": case_second_stream_wait,
    "item_sync": case_item_sync,
    "late_rank_allreduce": case_late_rank_allreduce,
    "graph_replay": case_graph_replay,
}


# ----------------------------------------------------------------------------------------------
# The truth, from the placement records


def host_categories(r: PathRank, a: int, b: int) -> list[tuple[int, int, str]]:
    """Host thread time [a, b) cut by the innermost host event open (the spec's owner rule)."""
    events = [(s, e, cat) for s, e, cat in r.host_events if s < b and e > a]
    for c, api in r.calls:
        if c.start < b and c.end > a:
            if api not in LAUNCH_CALLS | SYNC_CALLS:
                raise AssertionError(f"{api} on the path: its category is not defined by the spec")
            events.append((c.start, c.end, "launch_overhead" if api in LAUNCH_CALLS else "sync"))
    cuts = sorted({a, b} | {t for s, e, _ in events for t in (s, e) if a < t < b})
    out: list[tuple[int, int, str]] = []
    for lo, hi in zip(cuts, cuts[1:]):
        open_now = [(s, -e, cat) for s, e, cat in events if s <= lo and e >= hi]
        cat = max(open_now)[2] if open_now else "host_untraced"  # innermost: the latest start
        if out and out[-1][2] == cat:
            out[-1] = (out[-1][0], hi, cat)
        else:
            out.append((lo, hi, cat))
    return out


def resolved_path(r: PathRank, n: int) -> list[tuple[int, int, str]]:
    """Step ``n``'s path segments with host time categorised; checks that they partition the step."""
    out: list[tuple[int, int, str]] = []
    for a, b, cat in r.paths[n]:
        out += host_categories(r, a, b) if cat == "host" else [(a, b, cat)]
    start, end = r.windows[n]
    assert out[0][0] == start and out[-1][1] == end, f"rank {r.rank} step {n}: the path misses the window's ends"
    for (_, prev_end, _), (s, e, cat) in zip(out, out[1:]):
        assert s == prev_end and e >= s, f"rank {r.rank} step {n}: the path is not contiguous at {cat}"
    return out


def completions(r: PathRank) -> dict[int, int]:
    """c_w = max(the step's end, the end of every activity launched in the step); c_0 = step 1's start."""
    ends: dict[int, int] = {}
    for a in r.acts:
        ends[a.step] = max(ends.get(a.step, a.end), a.end)
    out = {n: max(end, ends.get(n, end)) for n, (_, end) in r.windows.items()}
    out[0] = r.windows[1][0]
    return out


def median_rank_saving(r: PathRank, n: int) -> int:
    """The rank's on-path waiting beyond each collective's median arrival (every bucket is on it)."""
    saving = 0.0
    for act, arrivals in r.collectives.get(n, []):
        saving += max(0.0, max(arrivals) - max(act.start, statistics.median(arrivals)))
    return round(saving)


def check_schedule(r: PathRank) -> None:
    """More than half of each stream's edges bind with the turnaround; no activity leaves its step."""
    by_stream: dict[int, list[Act]] = {}
    for a in r.acts:
        by_stream.setdefault(a.stream, []).append(a)
        start, end = r.windows[a.step]
        assert start < a.call.start and a.end < end, f"rank {r.rank}: an activity outside step {a.step}"
    for stream, acts in by_stream.items():
        binding = sum(a.binding == "stream" for a in acts[1:])
        assert 2 * binding > len(acts) - 1, f"rank {r.rank} stream {stream}: the median turnaround is ambiguous"


def step_truth(r: PathRank, n: int, replaced: dict[str, PathRank]) -> StepTruth:
    segments = resolved_path(r, n)
    composition = dict.fromkeys(CATEGORIES, 0)
    for a, b, cat in segments:
        composition[cat] += b - a
    start, end = r.windows[n]
    step_ns = end - start
    groups = sorted(((sum(composition[c] for c in cats), g) for g, cats in GROUPS.items()), reverse=True)
    assert groups[0][0] - groups[1][0] > 0.02 * step_ns, f"rank {r.rank} step {n}: bound_by is a near tie"
    c = completions(r)
    whatif = {}
    for name, other in replaced.items():
        c2 = completions(other)
        whatif[name] = step_ns - ((c[n] - c[n - 1]) - (c2[n] - c2[n - 1]))
    whatif["roofline"] = step_ns  # no op has shapes: nothing is modelled
    whatif["median_rank"] = step_ns - median_rank_saving(r, n)
    base = mp.BASE_TIME_NS  # times on the report's clock (the trace's baseTimeNanoseconds added)
    return StepTruth(r.rank, n, start + base, end + base, step_ns, composition, groups[0][1],
                     groups[0][0] / step_ns, {k: whatif[k] for k in SCENARIOS},
                     [(a + base, b + base, cat) for a, b, cat in segments])


def build_case(kind: str, seed: int = 1, steps: int = 4) -> PathCase:
    """Place ``kind`` measured and under each what-if scenario; the traces are the measured ones."""
    def placed(scenario: Scenario) -> list[PathRank]:
        return CASES[kind](random.Random(f"{kind}:{seed}"), steps, scenario)

    measured = placed(MEASURED)
    replaced = {name: placed(s) for name, s in REPLACED.items()}
    truth = []
    for i, r in enumerate(measured):
        check_schedule(r)
        truth += [step_truth(r, n, {name: ranks[i] for name, ranks in replaced.items()}) for n in sorted(r.windows)]
    return PathCase(kind, {r.rank: r.document() for r in measured}, truth)


def write_case(case: PathCase, out_dir: pathlib.Path) -> pathlib.Path:
    """One file for a one-rank case, else a folder of ``rank{r}.json``; returns what to analyse."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if len(case.traces) == 1:
        path = out_dir / f"{case.name}.json"
        path.write_text(mp.kw.dumps(next(iter(case.traces.values())), separators=(",", ":")))
        return path
    folder = out_dir / case.name
    folder.mkdir(exist_ok=True)
    for rank, doc in case.traces.items():
        (folder / f"rank{rank}.json").write_text(mp.kw.dumps(doc, separators=(",", ":")))
    return folder


# ----------------------------------------------------------------------------------------------
# Found vs planted


@dataclass
class Check:
    case: str
    rank: int
    step: int
    what: str  # a category, "path", or "whatif:<scenario>"
    planted: float
    found: float | None
    step_ns: int

    @property
    def ok(self) -> bool:
        if self.found is None or (isinstance(self.found, float) and math.isnan(self.found)):
            return False
        return abs(self.found - self.planted) <= max(TOLERANCE * abs(self.planted), FLOOR_SHARE * self.step_ns)


def rows_by_key(frame: Any, keys: Sequence[str]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """A steps/whatif table's rows by key (rank, step[, scenario]); whole-trace rows (step <NA>) skipped."""
    out = {}
    for row in ([] if frame is None else frame.to_dict("records")):
        step = row.get("step")
        if step is None or str(step) in ("<NA>", "nan", "NaT"):
            continue
        out[tuple(int(row[k]) if k != "scenario" else row[k] for k in keys)] = row
    return out


def compare(case: PathCase, steps: Any, whatif: Any) -> list[Check]:
    """Each step's path length, every category and every what-if step time, found vs planted."""
    found_steps = rows_by_key(steps, ("rank", "step"))
    found_whatif = rows_by_key(whatif, ("rank", "step", "scenario"))
    checks = []
    for t in case.truth:
        row = found_steps.get((t.rank, t.step), {})
        checks.append(Check(case.name, t.rank, t.step, "path", t.step_ns, row.get("path_ns"), t.step_ns))
        for cat in CATEGORIES:
            checks.append(Check(case.name, t.rank, t.step, cat, t.composition[cat], row.get(f"{cat}_ns"), t.step_ns))
        for scenario, ns in t.whatif.items():
            w = found_whatif.get((t.rank, t.step, scenario), {})
            checks.append(Check(case.name, t.rank, t.step, f"whatif:{scenario}", ns, w.get("whatif_ns"), t.step_ns))
    return checks


def truth_json(case: PathCase) -> list[dict[str, Any]]:
    return [{k: v for k, v in asdict(t).items() if k != "segments"} for t in case.truth]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=pathlib.Path, help="output directory")
    ap.add_argument("--steps", type=int, default=4, help="steps per case (default 4)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.steps < 1:
        print("make_planted_paths: --steps must be at least 1", file=sys.stderr)
        return 2
    truth = {}
    for kind in CASES:
        case = build_case(kind, args.seed, args.steps)
        truth[case.name] = {"path": write_case(case, args.out).name, "steps": truth_json(case)}
    (args.out / "truth.json").write_text(json.dumps(truth, indent=1))
    print(f"{len(truth)} cases in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
