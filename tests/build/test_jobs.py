"""cubridge.build.jobs: independent builds run together, results in order, every
build finished before a failure is raised."""

from __future__ import annotations

import threading

import pytest

from cubridge.build.jobs import build_all, build_jobs, start_builds


def test_builds_run_together_and_come_back_in_order(monkeypatch):
    monkeypatch.setenv("CUBRIDGE_BUILD_JOBS", "3")
    together = threading.Barrier(3, timeout=10)  # breaks unless all three run at once

    def build(i):
        return lambda: (together.wait(), i)[1]

    assert build_all([build(i) for i in range(3)]) == [0, 1, 2]


def test_every_build_ends_before_the_first_failure_is_raised(monkeypatch):
    monkeypatch.setenv("CUBRIDGE_BUILD_JOBS", "2")
    done = []

    def fails(name):
        def run():
            raise RuntimeError(name)
        return run

    def slow_ok():
        threading.Event().wait(0.2)
        done.append("ok")
        return "ok"

    with pytest.raises(RuntimeError, match="first"):
        build_all([fails("first"), slow_ok, fails("second")])
    assert done == ["ok"]


def test_one_job_builds_one_after_another(monkeypatch):
    monkeypatch.setenv("CUBRIDGE_BUILD_JOBS", "1")
    threads = []
    build_all([lambda: threads.append(threading.current_thread()) for _ in range(3)])
    assert threads == [threading.main_thread()] * 3


def test_futures_give_each_build_its_own_result_or_error(monkeypatch):
    monkeypatch.delenv("CUBRIDGE_BUILD_JOBS", raising=False)
    assert build_jobs() >= 1

    def bad():
        raise ValueError("spills")

    ok, failed = start_builds([lambda: 7, bad])
    assert ok.result(timeout=10) == 7
    with pytest.raises(ValueError, match="spills"):
        failed.result(timeout=10)


@pytest.mark.parametrize("text", ["0", "-2", "many"])
def test_a_bad_job_count_names_the_variable(monkeypatch, text):
    monkeypatch.setenv("CUBRIDGE_BUILD_JOBS", text)
    with pytest.raises(ValueError, match="CUBRIDGE_BUILD_JOBS"):
        build_jobs()
