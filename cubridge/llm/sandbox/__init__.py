"""Sandboxing of generated code: a static allow-list check, then execution in
a separate, limited process; and a watchdog for child processes that drive
generated kernels on the GPU (watchdog.py)."""

from cubridge.llm.sandbox.process import SandboxLimits, SandboxResult, run_generated
from cubridge.llm.sandbox.static_check import CUIR_MODULES, check_source

__all__ = ["CUIR_MODULES", "SandboxLimits", "SandboxResult", "check_source", "run_generated"]
