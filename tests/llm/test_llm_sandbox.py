"""Sandboxing of generated code: the static allow-list and the limited process."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

import cubridge
from cubridge.llm import SandboxError, SandboxLimits, StaticCheckError, check_source, run_generated

GOOD_CUIR = """
from __future__ import annotations
import math
import torch
import torch.nn.functional as F
from cubridge.ir import KernelBase

class Kernel(KernelBase):
    def __init__(self, block_m: int = 64) -> None:
        super().__init__()
        self._block_m = block_m

    def score_mod(self, s, b, h, q_idx, kv_idx):
        return 30.0 * torch.tanh(s / 30.0) + F.relu(s) * 0 + math.log2(math.e) * 0

    def block(self):
        return getattr(self, "_block_m")
"""


def test_plain_cuir_passes():
    check_source(GOOD_CUIR)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("import os", "line 1: import of 'os' is not allowed"),
        ("import subprocess as sp", "line 1: import of 'subprocess' is not allowed"),
        ("from socket import socket", "line 1: import from 'socket' is not allowed"),
        ("from . import x", "line 1: relative imports are not allowed"),
        ("from torch import load", "line 1: torch.load is not allowed"),
        ("from cubridge.ir import *", "import *' is not allowed"),
        ("x = open('f')", "line 1: open() is not allowed"),
        ("exec('1')", "line 1: exec() is not allowed"),
        ("eval('1')", "line 1: eval() is not allowed"),
        ("m = __import__('os')", "line 1: __import__() is not allowed"),
        ("g = globals()", "line 1: globals() is not allowed"),
        ("import torch\nt = torch.hub.load('x', 'y')", "line 2: torch.hub is not allowed"),
        ("import torch\nt = torch._C", "line 2: torch._C is not allowed"),
        ("import torch\nt = torch.cuda.is_available()", "line 2: torch.cuda is not allowed"),
        ("import torch as t\nz = t.utils", "line 2: torch.utils is not allowed"),
        ("import torch\nalias = torch", "line 2: the module 'torch' may only be used as"),
        ("c = ().__class__", "line 1: access to the attribute __class__ is not allowed"),
        ("b = __builtins__", "line 1: the name __builtins__ is not allowed"),
        ("import torch\nv = getattr(torch, 'lo' + 'ad')", "computed attribute name"),
        ("import torch\nv = getattr(torch, 'load')", "line 2: torch.load is not allowed"),
        ("s = '{0.__class__}'.format(1)", "line 1: a string naming a dunder"),
        ("import cubridge.ir\nb = cubridge.build", "cubridge.build was not imported"),
        ("import math\nx = math.os", "line 2: access to the attribute 'os' is not allowed"),
        ("def f(:\n  pass", "is not valid Python: line 1"),
        (
            "import torch\nc = torch.zeros(1)._cdata",
            "private attribute '_cdata' is allowed only on",
        ),
        ("import torch\ntorch.zeros(1).numpy()", "line 2: access to the attribute 'numpy'"),
    ],
)
def test_static_check_names_the_line(line, message):
    with pytest.raises(StaticCheckError) as err:
        check_source(line)
    assert message in str(err.value)
    assert err.value.violations and err.value.violations[0][0] >= 1


def test_static_check_lists_every_problem():
    with pytest.raises(StaticCheckError, match=r"\(3 problem\(s\)\)") as err:
        check_source("import os\nimport sys\nopen('x')\n", filename="target.py")
    assert [line for line, _ in err.value.violations] == [1, 2, 3]
    assert "target.py line 3: open()" in str(err.value)


FAST = SandboxLimits(timeout_s=3, memory_mb=2048)


def run(source: str, **kwargs):
    kwargs.setdefault("limits", FAST)
    kwargs.setdefault("preload", ())
    return run_generated(source, **kwargs)


@pytest.fixture(params=["forked", "spawned"])
def process(request, monkeypatch):
    """The sandbox process both ways: forked from a warm server (the default) and
    spawned fresh (CUBRIDGE_SANDBOX_FORK=0, and where a server cannot start)."""
    monkeypatch.setenv("CUBRIDGE_SANDBOX_FORK", "1" if request.param == "forked" else "0")
    return "forked from a warm server" if request.param == "forked" else "spawned"


def test_result_comes_back_with_isolation_report(process):
    result = run("def f(a, b=1):\n    print('hello')\n    return [a, b]\n", call="f", args=(3,),
                 kwargs={"b": 4})  # fmt: skip
    assert result.value == [3, 4] and result.stdout == "hello\n"
    assert result.isolation["process"] == process
    assert result.isolation["RLIMIT_AS"] == str(2048 * 1024 * 1024)
    assert result.isolation["audit_hook"] == "installed"
    assert result.isolation["network"].startswith(("enforced", "not enforced"))


def test_trusted_entry_gets_the_module():
    # entry(module, *args): inspect.getsource reads the generated module back.
    result = run("VALUE = 41\n", entry="inspect:getsource")
    assert result.value == "VALUE = 41\n"
    with pytest.raises(SandboxError, match="the result cannot be sent back"):
        run("def f():\n    return lambda: 1\n", call="f")


def test_exception_names_the_generated_line(process):
    source = "def helper(x):\n    return x[5]\n\ndef f():\n    return helper([1, 2])\n"
    with pytest.raises(SandboxError) as err:
        run(source, call="f")
    assert err.value.kind == "exception" and err.value.line == 2
    assert str(err.value) == (
        "generated.py: IndexError: list index out of range at line 2: return x[5]"
    )


@pytest.mark.slow
def test_endless_loop_times_out_at_its_line(process):
    source = "def f():\n    n = 0\n    while True:\n        n += 1\n"
    with pytest.raises(SandboxError) as err:
        run(source, call="f", limits=SandboxLimits(timeout_s=1.5))
    assert err.value.kind == "timeout" and err.value.line in (3, 4)
    assert "timed out after 1.5s at line" in str(err.value)


def test_memory_limit(process):
    with pytest.raises(SandboxError) as err:
        run("def f():\n    return bytearray(8 * 1024 ** 3)\n", call="f")
    assert err.value.kind == "memory" and err.value.line == 2


@pytest.mark.slow
def test_cpu_limit_kills_with_sigxcpu(process):
    source = "def f():\n    while True:\n        pass\n"
    with pytest.raises(SandboxError) as err:
        run(source, call="f", limits=SandboxLimits(timeout_s=20, cpu_s=1))
    assert err.value.kind == "timeout" and "CPU time limit of 1s exceeded" in str(err.value)


def test_static_check_runs_first():
    with pytest.raises(StaticCheckError, match="import of 'os'"):
        run_generated("import os\n")


def test_no_keys_or_proxies_in_the_environment(process, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")
    source = "import os\ndef f():\n    return dict(os.environ)\n"  # os: static check skipped
    env = run(source, call="f", allowed_modules=None).value
    assert "OPENAI_API_KEY" not in env and "HTTPS_PROXY" not in env
    assert set(env) <= {"PATH", "HOME", "TMPDIR", "LANG", "PYTHONPATH", "PYTHONHASHSEED",
                        "PYTHONDONTWRITEBYTECODE", "PYTHONFAULTHANDLER", "LC_CTYPE"}  # fmt: skip


@pytest.mark.slow
def test_audit_hook_refuses_network_processes_and_outside_writes(process, tmp_path):
    # The static check would refuse these; skip it to test the second line of defence.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    threading.Thread(target=lambda: listener.accept(), daemon=True).start()
    cases = {
        f"import socket\ndef f():\n    socket.create_connection(('127.0.0.1', {port}))\n": (
            "socket"
        ),
        "import subprocess\ndef f():\n    subprocess.run(['true'])\n": "subprocess.Popen",
        f"def f():\n    open({str(tmp_path / 'x')!r}, 'w')\n": "writing",
    }
    for source, word in cases.items():
        with pytest.raises(SandboxError) as err:
            run(source, call="f", allowed_modules=None)
        assert "PermissionError" in str(err.value) and word in str(err.value), source
        assert err.value.line == 3 or err.value.line == 2
    listener.close()
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_torch_code_runs_with_torch_preloaded():
    source = "import torch\ndef f(n):\n    return torch.arange(n).sum().item()\n"
    assert (
        run_generated(source, call="f", args=(5,), limits=SandboxLimits(timeout_s=60)).value == 10
    )


LIBRARY_CUIR = sorted(Path(cubridge.__file__).parent.glob("kernels/*/cuir.py"))


def test_the_library_cuir_programs_pass_the_static_check():
    """Expert CuIR is what generated CuIR imitates: the allow-list must accept it."""
    if not LIBRARY_CUIR:
        pytest.skip("no kernels/*/cuir.py in the kernel library yet")
    for path in LIBRARY_CUIR:
        check_source(path.read_text(), filename=path.name)


@pytest.mark.slow
def test_a_library_cuir_program_loads_in_the_sandbox():
    if not LIBRARY_CUIR:
        pytest.skip("no kernels/*/cuir.py in the kernel library yet")
    source = LIBRARY_CUIR[0].read_text()
    names = run_generated(source, filename="cuir.py", entry="builtins:dir").value
    assert "AttentionKernelBase" in names  # the shared numerics import in the sandbox too
