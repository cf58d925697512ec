"""The sandbox's fork server: warm processes that fork one child per job, no state
from one job in the next, and a fresh process whenever a server breaks or
cannot start."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from cubridge.llm import SandboxError, SandboxLimits, run_generated
from cubridge.llm.sandbox import forkserver

LIMITS = SandboxLimits(timeout_s=20, memory_mb=2048)


def run(source: str, **kwargs):
    kwargs.setdefault("limits", LIMITS)
    kwargs.setdefault("preload", ())
    kwargs.setdefault("allowed_modules", None)  # these jobs read os / sys on purpose
    return run_generated(source, **kwargs)


@pytest.fixture(autouse=True)
def forking(monkeypatch):
    monkeypatch.setenv("CUBRIDGE_SANDBOX_FORK", "1")


def _servers() -> list[forkserver.ForkServer]:
    return list(forkserver._every)


def test_jobs_fork_from_one_warm_server_and_share_no_state():
    source = ("import os, sys\n"
              "def f():\n"
              "    seen = getattr(sys, 'cubridge_test_mark', None)\n"
              "    sys.cubridge_test_mark = os.getpid()\n"
              "    return os.getpid(), os.getppid(), seen, os.getcwd(), os.environ['HOME']\n")
    first = run(source, call="f")
    servers = _servers()
    second = run(source, call="f")
    assert first.isolation["process"] == second.isolation["process"] == "forked from a warm server"
    assert _servers() == servers  # the same server, no new one
    pid1, parent1, seen1, cwd1, home1 = first.value
    pid2, parent2, seen2, cwd2, home2 = second.value
    assert pid1 != pid2 and parent1 == parent2  # two children of one server
    assert seen1 is None and seen2 is None  # the first job's mark is not in the second
    assert cwd1 == home1 and cwd2 == home2 and cwd1 != cwd2  # each in its own job folder
    assert os.path.basename(cwd1).startswith("sandbox-")


def test_a_timed_out_child_is_killed_and_its_server_serves_the_next_job():
    source = "import time\ndef f():\n    while True:\n        time.sleep(0.01)\n"
    with pytest.raises(SandboxError) as err:
        run(source, call="f", limits=SandboxLimits(timeout_s=1.0, memory_mb=2048))
    assert err.value.kind == "timeout" and err.value.line in (3, 4)
    servers = _servers()
    assert run("def f():\n    return 7\n", call="f").value == 7
    assert _servers() == servers and all(s.alive() for s in servers)


def test_a_server_killed_mid_job_gives_way_to_a_fresh_process():
    run("def f():\n    return 0\n", call="f")  # a warm server for these modules
    victims = [s for s in _servers()  # run()'s own (servers of other tests live on)
               if s.key[0] == () and "OMP_NUM_THREADS" not in dict(s.key[1])]
    assert victims

    def kill_servers():
        time.sleep(0.5)
        for server in victims:
            os.kill(server.proc.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_servers)
    killer.start()
    result = run("import time\ndef f():\n    time.sleep(1.5)\n    return 'done'\n", call="f")
    killer.join()
    assert result.value == "done" and result.isolation["process"] == "spawned"
    again = run("def f():\n    return 1\n", call="f")
    assert again.isolation["process"] == "forked from a warm server"
    assert not any(s in _servers() for s in victims)  # dead servers are dropped


def test_a_server_that_cannot_start_is_recorded_and_jobs_spawn():
    with pytest.raises(SandboxError, match="ModuleNotFoundError"):
        run("def f():\n    return 1\n", call="f", preload=("cubridge_no_such_module",))
    reasons = [why for key, why in forkserver.fork_unavailable.items()
               if key[0] == ("cubridge_no_such_module",)]
    assert reasons and "cubridge_no_such_module" in reasons[0]


def test_forking_off_spawns(monkeypatch):
    monkeypatch.setenv("CUBRIDGE_SANDBOX_FORK", "0")
    assert run("def f():\n    return 2\n", call="f").isolation["process"] == "spawned"


def test_concurrent_jobs_each_take_a_server_of_their_own():
    source = "import os, time\ndef f():\n    time.sleep(0.5)\n    return os.getppid()\n"
    results: list = [None, None]

    def job(i: int) -> None:
        results[i] = run(source, call="f")

    threads = [threading.Thread(target=job, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.isolation["process"] == "forked from a warm server" for r in results)
    assert results[0].value != results[1].value  # two servers, one job each
    key = next(s.key for s in _servers()
               if s.key[0] == () and "OMP_NUM_THREADS" not in dict(s.key[1]))  # run()'s
    idle = forkserver._idle[key]
    assert len(idle) >= 2 and all(s.alive() for s in idle)  # both back in the pool
