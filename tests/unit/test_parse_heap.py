"""``traceview.runtime.parse_heap``: the C heap's settings while the ``traceview`` command parses a
Kineto trace, set once around the outermost parse and left at glibc's own ceilings afterwards,
whatever happens inside; a library call (no hooks) makes no setting at all."""

from __future__ import annotations

import platform
import sys

import pytest
from conftest import SAMPLE_TRACES

from traceview import runtime
from traceview.parsers.kineto import parse_kineto

TRACE = SAMPLE_TRACES / "torch_cpu_mlp.json.gz"


@pytest.fixture
def mallopt_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The calls to ``mallopt`` (through the runtime's C library accessor), recorded instead of made."""
    calls: list[tuple[int, int]] = []

    def fake_mallopt(parameter: int, value: int) -> int:
        calls.append((parameter, value))
        return 1

    monkeypatch.setattr(runtime, "libc_function", lambda name: fake_mallopt if name == "mallopt" else None)
    return calls


def test_settings_are_set_around_the_outermost_block_only(mallopt_calls: list[tuple[int, int]]) -> None:
    during, after = list(runtime.PARSE_HEAP_SETTINGS.items()), list(runtime.AFTER_PARSE_HEAP_SETTINGS.items())
    with runtime.parse_heap():
        assert mallopt_calls == during
        with runtime.parse_heap():  # a parallel parse falling back to a serial one
            assert mallopt_calls == during
        assert mallopt_calls == during
    assert mallopt_calls == during + after


def test_settings_are_restored_when_the_parse_fails(mallopt_calls: list[tuple[int, int]]) -> None:
    with pytest.raises(ValueError), runtime.parse_heap():
        raise ValueError("damaged trace")
    assert mallopt_calls[-len(runtime.AFTER_PARSE_HEAP_SETTINGS):] == list(runtime.AFTER_PARSE_HEAP_SETTINGS.items())
    mallopt_calls.clear()
    with runtime.parse_heap():  # the depth went back to 0: the next parse sets them again
        pass
    assert len(mallopt_calls) == len(runtime.PARSE_HEAP_SETTINGS) + len(runtime.AFTER_PARSE_HEAP_SETTINGS)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_kineto_parse_with_the_commands_hooks_runs_inside_the_settings(mallopt_calls: list[tuple[int, int]],
                                                                         jobs: int) -> None:
    trace = parse_kineto(TRACE, jobs=jobs, hooks=runtime.cli_parse_hooks())
    assert trace.events.num_rows > 0
    n_during = len(runtime.PARSE_HEAP_SETTINGS)
    assert mallopt_calls[:n_during] == list(runtime.PARSE_HEAP_SETTINGS.items())
    assert mallopt_calls[n_during:] == list(runtime.AFTER_PARSE_HEAP_SETTINGS.items())


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_kineto_parse_without_hooks_sets_nothing(mallopt_calls: list[tuple[int, int]], jobs: int) -> None:
    import traceview

    assert parse_kineto(TRACE, jobs=jobs).events.num_rows > 0
    assert traceview.load(TRACE, use_cache=False, jobs=jobs).events.num_rows > 0
    assert mallopt_calls == []


def test_the_analyze_command_parses_inside_the_settings(mallopt_calls: list[tuple[int, int]],
                                                         monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from traceview.cli import main

    monkeypatch.setattr(sys, "argv", ["traceview", "analyze", str(TRACE), "--no-cache", "-f", "json",
                                      "-o", str(tmp_path / "r.json")])
    with pytest.raises(SystemExit) as done:
        main()
    assert done.value.code == 0
    assert mallopt_calls == [*runtime.PARSE_HEAP_SETTINGS.items(), *runtime.AFTER_PARSE_HEAP_SETTINGS.items()]


def test_the_environment_can_leave_glibc_alone(mallopt_calls: list[tuple[int, int]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEVIEW_PARSE_HEAP", "0")
    with runtime.parse_heap():
        pass
    assert mallopt_calls == []


def test_no_c_library_function_means_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime, "libc_function", lambda name: None)
    with runtime.parse_heap():
        pass  # not glibc (macOS, musl, Windows): the parse runs with the library's own settings


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's parameters are glibc's")
def test_glibc_accepts_every_value() -> None:
    # mallopt returns 0 for a value it refuses (and then changes nothing): each must be taken
    mallopt = runtime.libc_function("mallopt")
    assert mallopt is not None
    for parameter, value in [*runtime.PARSE_HEAP_SETTINGS.items(), *runtime.AFTER_PARSE_HEAP_SETTINGS.items()]:
        assert mallopt(parameter, value) == 1, (parameter, value)


def test_threads_parsing_at_once_set_once_and_restore_once(mallopt_calls: list[tuple[int, int]]) -> None:
    import threading

    inside, leave = threading.Barrier(3), threading.Event()

    def parse() -> None:
        with runtime.parse_heap():
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=parse) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()  # both parses are inside their blocks
    assert mallopt_calls == list(runtime.PARSE_HEAP_SETTINGS.items())
    leave.set()
    for thread in threads:
        thread.join()
    assert mallopt_calls == [*runtime.PARSE_HEAP_SETTINGS.items(), *runtime.AFTER_PARSE_HEAP_SETTINGS.items()]
