"""Loading cubins and launching their kernels through the CUDA driver API
(cuda-python's cuda.bindings.driver), on PyTorch's current stream and in the
primary context PyTorch uses."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from cubridge.build.arch import arch_for_capability
from cubridge.build.errors import LaunchError, NoGpuError


def _driver() -> Any:
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise NoGpuError(
            "launching kernels needs cuda-python's driver bindings "
            "(pip install 'cuda-python>=12.6', module cuda.bindings.driver)"
        ) from exc
    return driver


def _check(result: Any, what: str) -> Any:
    """Unpack a cuda-python result tuple, raising LaunchError on any error code."""
    drv = _driver()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        raise LaunchError(f"{what} failed: {name.decode() if name else err} "
                          f"({text.decode() if text else 'no description'})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def require_cuda_device(device: torch.device | None = None) -> torch.device:
    """The CUDA device to run on; NoGpuError when there is none."""
    if device is not None and device.type == "cuda" and device.index is not None:
        return device  # (a CUDA tensor's device: no availability probe on the launch path)
    if not torch.cuda.is_available():
        build = "a CPU-only PyTorch build" if torch.version.cuda is None else "no visible GPU"
        raise NoGpuError(f"no CUDA GPU available ({build}); run GPU work on a machine with one")
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    if device.type != "cuda":
        raise NoGpuError(f"expected a CUDA device, got {device}")
    return torch.device("cuda", device.index if device.index is not None
                        else torch.cuda.current_device())


def current_raw_stream(device: torch.device) -> int:
    """The handle of PyTorch's current stream on CUDA `device`. Read on every
    launch: through the accessor inductor's generated code uses where this PyTorch
    has it (torch.cuda.current_stream builds a Python Stream object each call,
    ~10 us), else through the public API."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device.index if device.index is not None else torch.cuda.current_device())
    return torch.cuda.current_stream(device).cuda_stream


def device_arch(device: torch.device) -> str:
    """Compile target for a device, e.g. 'sm_90a' on an H100."""
    major, minor = torch.cuda.get_device_capability(device)
    return arch_for_capability(major, minor)


def _make_context_current(device: torch.device) -> None:
    """Make PyTorch's primary context for `device` current on this thread."""
    drv = _driver()
    torch.cuda.init()
    with torch.cuda.device(device):
        torch.cuda.current_stream(device)  # forces the runtime to bind the primary context
        ctx = _check(drv.cuCtxGetCurrent(), "cuCtxGetCurrent")
        if ctx is None or int(ctx) == 0:
            dev = _check(drv.cuDeviceGet(device.index), "cuDeviceGet")
            ctx = _check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
            _check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


@dataclass
class KernelFunction:
    """One __global__ function of a loaded module."""

    name: str
    handle: Any
    device: torch.device
    _smem_limit_set: int = field(default=0)

    def launch(self, grid: tuple[int, int, int], block: tuple[int, int, int], smem_bytes: int,
               params: ctypes.Structure) -> None:
        """Launch on the current PyTorch stream of the function's device with a
        single by-value struct parameter (copied by the driver at launch)."""
        drv = _driver()
        if any(g <= 0 for g in grid):
            raise LaunchError(f"{self.name}: empty grid {grid}")
        if grid[1] > 65535 or grid[2] > 65535:
            raise LaunchError(f"{self.name}: grid {grid} exceeds 65535 in y or z")
        if smem_bytes > self._smem_limit_set:
            self._raise_smem_limit(smem_bytes)
        stream = current_raw_stream(self.device)
        arg_ptrs = (ctypes.c_void_p * 1)(ctypes.addressof(params))
        _check(drv.cuLaunchKernel(self.handle, *grid, *block, smem_bytes,
                                  drv.CUstream(stream), ctypes.addressof(arg_ptrs), 0),
               f"launch of {self.name} (grid {grid}, block {block}, smem {smem_bytes} B)")

    def _raise_smem_limit(self, smem_bytes: int) -> None:
        drv = _driver()
        attr = drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN
        dev = _check(drv.cuDeviceGet(self.device.index), "cuDeviceGet")
        limit = _check(drv.cuDeviceGetAttribute(attr, dev), "cuDeviceGetAttribute")
        if smem_bytes > limit:
            raise LaunchError(f"{self.name} needs {smem_bytes} B of shared memory per block; "
                              f"this device allows {limit} B")
        _check(drv.cuFuncSetAttribute(
            self.handle,
            drv.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem_bytes), f"raising the shared-memory limit of {self.name}")
        self._smem_limit_set = smem_bytes


@dataclass
class LoadedModule:
    """A cubin loaded into one device's primary context."""

    handle: Any
    device: torch.device
    _functions: dict[str, KernelFunction] = field(default_factory=dict)

    def function(self, name: str) -> KernelFunction:
        if name not in self._functions:
            drv = _driver()
            handle = _check(drv.cuModuleGetFunction(self.handle, name.encode()),
                            f"looking up kernel {name!r} in the cubin")
            self._functions[name] = KernelFunction(name, handle, self.device)
        return self._functions[name]

    def has_global(self, name: str) -> bool:
        drv = _driver()
        err, *_ = drv.cuModuleGetGlobal(self.handle, name.encode())
        return err == drv.CUresult.CUDA_SUCCESS

    def zero_global(self, name: str) -> None:
        """Zero a __device__ variable (stream-ordered on the current stream)."""
        drv = _driver()
        ptr, size = _check(drv.cuModuleGetGlobal(self.handle, name.encode()),
                           f"looking up global {name!r} in the cubin")
        with torch.cuda.device(self.device):
            stream = torch.cuda.current_stream(self.device).cuda_stream
            _check(drv.cuMemsetD8Async(ptr, 0, size, drv.CUstream(stream)), f"zeroing {name!r}")

    def read_global(self, name: str, nbytes: int) -> bytes:
        """Copy a __device__/__constant__ variable's bytes to the host."""
        drv = _driver()
        ptr, size = _check(drv.cuModuleGetGlobal(self.handle, name.encode()),
                           f"looking up global {name!r} in the cubin")
        if size < nbytes:
            raise LaunchError(f"global {name!r} has {size} bytes, expected at least {nbytes}")
        buf = (ctypes.c_char * nbytes)()
        with torch.cuda.device(self.device):
            _check(drv.cuMemcpyDtoH(ctypes.addressof(buf), ptr, nbytes), f"reading {name!r}")
        return bytes(buf)


# Loaded modules, by (cubin key, device index): a cache, not state.
_MODULES: dict[tuple[str, int], LoadedModule] = {}


def load_cubin(key: str, cubin_path: Path, device: torch.device) -> LoadedModule:
    """Load (once per device) the cubin at `cubin_path`, identified by its cache key."""
    device = require_cuda_device(device)
    cached = _MODULES.get((key, device.index))
    if cached is not None:
        return cached
    drv = _driver()
    _make_context_current(device)
    with torch.cuda.device(device):
        handle = _check(drv.cuModuleLoadData(cubin_path.read_bytes()),
                        f"loading cubin {cubin_path}")
    module = LoadedModule(handle, device)
    _MODULES[(key, device.index)] = module
    return module
