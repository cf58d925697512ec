"""Independent builds at once. nvcc runs as a subprocess, so threads are enough
to keep every core busy: a variant's dtypes (`CompiledVariant.compile`), the LLM
path's builds of an edit and the test modules' compile checks each take about the
time of their slowest build instead of the sum.

$CUBRIDGE_BUILD_JOBS caps how many run together (default: the CPUs this
process may use; 1 builds one after another)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")


def build_jobs() -> int:
    """How many builds run together: $CUBRIDGE_BUILD_JOBS, else the usable CPUs."""
    text = os.environ.get("CUBRIDGE_BUILD_JOBS", "").strip()
    if text:
        try:
            jobs = int(text)
        except ValueError:
            jobs = 0
        if jobs < 1:
            raise ValueError(f"CUBRIDGE_BUILD_JOBS={text!r}: expected a whole number >= 1")
        return jobs
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def start_builds(builds: Sequence[Callable[[], T]]) -> list[Future[T]]:
    """Start every build; its Future gives its result or raises its error. The
    pool shuts down once the last build finishes, whoever waits on what."""
    pool = ThreadPoolExecutor(max_workers=max(1, min(build_jobs(), len(builds))),
                              thread_name_prefix="cubridge-build")
    futures = [pool.submit(build) for build in builds]
    pool.shutdown(wait=False)  # the queued builds still run; no new ones are taken
    return futures


def finished_builds(builds: Sequence[Callable[[], T]]) -> list[Future[T]]:
    """Run every build to its end, at most build_jobs() at once (what compiled
    stays in the cache whatever else failed); each Future is done."""
    futures = start_builds(builds)
    for future in futures:
        future.exception()  # waits, failed or not
    return futures


def build_all(builds: Sequence[Callable[[], T]]) -> list[T]:
    """Every build's result, in the order given; once all have ended, the first
    failure in that order is raised."""
    if len(builds) <= 1 or build_jobs() == 1:
        return [build() for build in builds]
    return [future.result() for future in finished_builds(builds)]
