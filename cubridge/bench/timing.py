"""Timing a call: median milliseconds after warm-up.

On a GPU: triton.testing.do_bench (CUDA events, L2 flushed between calls,
median), or CUDA events directly when triton is absent. The wall-clock timer
exists for CPU tests of the benchmark's logic; its numbers measure nothing.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

Timer = Callable[[Callable[[], object]], float]


@dataclass(frozen=True)
class TimingSettings:
    warmup_ms: float = 25.0
    rep_ms: float = 100.0


def do_bench_timer(settings: TimingSettings) -> Timer:
    from triton.testing import do_bench

    def timer(fn: Callable[[], object]) -> float:
        return float(do_bench(fn, warmup=settings.warmup_ms, rep=settings.rep_ms,
                              return_mode="median"))

    return timer


def cuda_event_timer(settings: TimingSettings) -> Timer:
    """do_bench's scheme without triton: warm up, then time single calls with events."""

    def timer(fn: Callable[[], object]) -> float:
        fn()
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        one = max(start.elapsed_time(end), 1e-3)
        for _ in range(max(1, int(settings.warmup_ms / one))):
            fn()
        times = []
        for _ in range(max(5, int(settings.rep_ms / one))):
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)

    return timer


def wallclock_timer(repeats: int = 3) -> Timer:
    """CPU tests only: median perf_counter time of a few calls, in ms."""

    def timer(fn: Callable[[], object]) -> float:
        fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)

    return timer


def gpu_timer(settings: TimingSettings) -> tuple[Timer, str]:
    """The best GPU timer available here and its name (recorded in reports)."""
    try:
        return do_bench_timer(settings), "triton.testing.do_bench (median)"
    except ImportError:
        return cuda_event_timer(settings), "CUDA events (median; triton not installed)"
