"""``loading.parse_heap``: the C heap's settings while a Kineto trace is parsed, set once around the
outermost parse and left at glibc's own ceilings afterwards, whatever happens inside."""

from __future__ import annotations

import platform

import pytest
from conftest import SAMPLE_TRACES

from traceview import loading
from traceview.parsers.kineto import parse_kineto


@pytest.fixture
def mallopt_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """The calls a parse makes to ``mallopt``, recorded instead of made."""
    calls: list[tuple[int, int]] = []

    def fake_mallopt(parameter: int, value: int) -> int:
        calls.append((parameter, value))
        return 1

    monkeypatch.setattr(loading, "libc_function", lambda name: fake_mallopt if name == "mallopt" else None)
    return calls


def test_settings_are_set_around_the_outermost_block_only(mallopt_calls: list[tuple[int, int]]) -> None:
    during, after = list(loading.PARSE_HEAP_SETTINGS.items()), list(loading.AFTER_PARSE_HEAP_SETTINGS.items())
    with loading.parse_heap():
        assert mallopt_calls == during
        with loading.parse_heap():  # a parallel parse falling back to a serial one
            assert mallopt_calls == during
        assert mallopt_calls == during
    assert mallopt_calls == during + after


def test_settings_are_restored_when_the_parse_fails(mallopt_calls: list[tuple[int, int]]) -> None:
    with pytest.raises(ValueError), loading.parse_heap():
        raise ValueError("damaged trace")
    assert mallopt_calls[-len(loading.AFTER_PARSE_HEAP_SETTINGS):] == list(loading.AFTER_PARSE_HEAP_SETTINGS.items())
    mallopt_calls.clear()
    with loading.parse_heap():  # the depth went back to 0: the next parse sets them again
        pass
    assert len(mallopt_calls) == len(loading.PARSE_HEAP_SETTINGS) + len(loading.AFTER_PARSE_HEAP_SETTINGS)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_kineto_parse_runs_inside_the_settings(mallopt_calls: list[tuple[int, int]], jobs: int) -> None:
    trace = parse_kineto(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", jobs=jobs)
    assert trace.events.num_rows > 0
    n_during = len(loading.PARSE_HEAP_SETTINGS)
    assert mallopt_calls[:n_during] == list(loading.PARSE_HEAP_SETTINGS.items())
    assert mallopt_calls[n_during:] == list(loading.AFTER_PARSE_HEAP_SETTINGS.items())


def test_the_environment_can_leave_glibc_alone(mallopt_calls: list[tuple[int, int]],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEVIEW_PARSE_HEAP", "0")
    with loading.parse_heap():
        pass
    assert mallopt_calls == []


def test_no_c_library_function_means_nothing_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(loading, "libc_function", lambda name: None)
    with loading.parse_heap():
        pass  # not glibc (macOS, musl, Windows): the parse runs with the library's own settings


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt's parameters are glibc's")
def test_glibc_accepts_every_value() -> None:
    # mallopt returns 0 for a value it refuses (and then changes nothing): each must be taken
    mallopt = loading.libc_function("mallopt")
    assert mallopt is not None
    for parameter, value in [*loading.PARSE_HEAP_SETTINGS.items(), *loading.AFTER_PARSE_HEAP_SETTINGS.items()]:
        assert mallopt(parameter, value) == 1, (parameter, value)


def test_threads_parsing_at_once_set_once_and_restore_once(mallopt_calls: list[tuple[int, int]]) -> None:
    import threading

    inside, leave = threading.Barrier(3), threading.Event()

    def parse() -> None:
        with loading.parse_heap():
            inside.wait()
            leave.wait()

    threads = [threading.Thread(target=parse) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait()  # both parses are inside their blocks
    assert mallopt_calls == list(loading.PARSE_HEAP_SETTINGS.items())
    leave.set()
    for thread in threads:
        thread.join()
    assert mallopt_calls == [*loading.PARSE_HEAP_SETTINGS.items(), *loading.AFTER_PARSE_HEAP_SETTINGS.items()]
