"""The watchdog that runs a lowered kernel's GPU check: a child that reports,
hangs, segfaults or exits with an error, stood in for by small Python programs
(on the CPU, so CI covers the mechanics)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

import cubridge
from cubridge.llm.sandbox.watchdog import EXITED, OVERTIME, SILENT, run_watched

ENV = {**os.environ, "PYTHONPATH": str(Path(cubridge.__file__).resolve().parents[1])}
PRELUDE = "from cubridge.llm.sandbox.watchdog import emit\nemit('ready')\n"


def watch(body: str, **limits: float):
    limits = {"silence_s": 2.0, "total_s": 60.0, "startup_s": 60.0, **limits}
    return run_watched([sys.executable, "-c", PRELUDE + body], env=ENV, **limits)


def test_events_and_output_come_back():
    w = watch("print('plain line')\nemit('case', done=1)\n"
              "import sys; print('oops', file=sys.stderr)")
    assert w.ok and w.ended == EXITED
    assert [e["event"] for e in w.events] == ["ready", "case"] and w.last("case")["done"] == 1
    assert w.output == "plain line" and w.stderr == "oops"


def test_a_silent_child_is_taken_to_hang_and_killed():
    start = time.monotonic()
    w = watch("emit('case', done=1)\nimport time\ntime.sleep(600)", silence_s=1.0)
    assert time.monotonic() - start < 30
    assert w.ended == SILENT and not w.ok and w.returncode is not None and w.returncode < 0
    assert "no progress for 1 s" in w.failure() and "hang" in w.failure()
    assert w.last("case")["done"] == 1  # what it did before it hung is kept


@pytest.mark.slow
def test_a_child_reporting_steadily_is_stopped_by_the_total_limit():
    w = watch("import time\nwhile True:\n    emit('tick')\n    time.sleep(0.2)",
              silence_s=5, total_s=2)
    assert w.ended == OVERTIME and "still running" in w.failure()


def test_a_segfault_is_named():
    w = watch("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert w.ended == EXITED and w.returncode == -11
    assert w.failure() == "the process was killed by SIGSEGV (a segmentation fault)"


def test_an_exit_code_is_reported_with_the_tail_of_stderr():
    w = watch("raise RuntimeError('CUDA error: an illegal memory access was encountered')")
    assert w.returncode == 1 and w.failure() == "the process exited with code 1"
    assert "illegal memory access" in w.stderr


@pytest.mark.slow
def test_grandchildren_die_with_the_child():
    """A wrapper (compute-sanitizer) and the program under it are one process group."""
    marker = "import subprocess, sys, time\n" \
             "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n" \
             "emit('child', pid=p.pid)\ntime.sleep(600)"
    w = watch(marker, silence_s=1.0)
    assert w.ended == SILENT
    pid = w.last("child")["pid"]
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"grandchild {pid} outlived the watchdog")
