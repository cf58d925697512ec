"""Errors of the build part: each says what is missing or wrong, and where."""

from __future__ import annotations


class BuildPartError(RuntimeError):
    """Base of every error raised by cubridge.build."""


class NvccNotFoundError(BuildPartError):
    """nvcc is not on PATH (nor under CUDA_HOME / CUDA_PATH)."""


class CompileError(BuildPartError):
    """nvcc rejected a source; `diagnostics` holds (file, line, severity, message)."""

    def __init__(self, message: str, diagnostics: list[tuple[str, int, str, str]], log: str):
        super().__init__(message)
        self.diagnostics = diagnostics
        self.log = log


class NoGpuError(BuildPartError):
    """No CUDA device is visible to PyTorch, or cuda-python is missing."""


class UnsupportedArchError(BuildPartError):
    """The device's architecture is older than the kernel needs, or not a known target."""


class LaunchError(BuildPartError):
    """A CUDA driver call failed, or a launch was asked with bad arguments."""
