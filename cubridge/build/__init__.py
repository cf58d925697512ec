"""cubridge.build: nvcc -> cached cubin (with its ptxas resource report), loading
and launching through the CUDA driver API, and the torch op that runs library
attention kernels.

    compiled = compile_cuda(Path("kernel.cu"), arch="sm_90a", hooks_header=text)
    compiled.resources_of("fa_sm80_fwd").spills   # False
"""

from cubridge.build.arch import arch_for_capability, check_supported, gencode_flag, parse_arch
from cubridge.build.compile import (
    COMMON_DIR,
    DEFAULT_HOOKS_DIR,
    CompiledKernel,
    cache_root,
    compile_cuda,
    cutlass_include_dir,
)
from cubridge.build.errors import (
    BuildPartError,
    CompileError,
    LaunchError,
    NoGpuError,
    NvccNotFoundError,
    UnsupportedArchError,
)
from cubridge.build.nvcc import find_nvcc, nvcc_available, nvcc_version, parse_diagnostics
from cubridge.build.resources import KernelResources, parse_ptxas_report

__all__ = [
    "COMMON_DIR",
    "DEFAULT_HOOKS_DIR",
    "BuildPartError",
    "CompileError",
    "CompiledKernel",
    "KernelResources",
    "LaunchError",
    "NoGpuError",
    "NvccNotFoundError",
    "UnsupportedArchError",
    "arch_for_capability",
    "cache_root",
    "check_supported",
    "compile_cuda",
    "cutlass_include_dir",
    "find_nvcc",
    "gencode_flag",
    "nvcc_available",
    "nvcc_version",
    "parse_arch",
    "parse_diagnostics",
    "parse_ptxas_report",
]
