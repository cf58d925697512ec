"""cubridge.build: nvcc -> cached cubin (with its ptxas resource report), loading
and launching through the CUDA driver API, and the torch op that runs library
attention kernels.

Compile any source (lowering's entry point):

    compiled = compile_cuda(Path("kernel.cu") or source_text, arch="sm_90a",
                            hooks_header=generated_text, defines={"CUBRIDGE_HEAD_DIM": 128})
    compiled.resources_of(entry_name)      # registers, smem, stack, spills (KernelResources)
    compiled.cubin_path, compiled.log, compiled.key

The cache ($CUBRIDGE_CACHE_DIR, else ~/.cache/cubridge) is keyed by the source,
the hooks header, every header under kernels/common and the source's directory,
arch, defines, flags, the nvcc version and (with use_cutlass) the nvidia-cutlass
version; each entry keeps kernel.cubin, resources.json, build.log, recipe.json
(the exact nvcc command) and the sources. A leading comment block (a generated
header's provenance) is not in the key. Independent builds run at once with
jobs.build_all / start_builds ($CUBRIDGE_BUILD_JOBS, default the CPUs).
Errors: CompileError (each diagnostic as file:line, generated headers named as
such), NvccNotFoundError, UnsupportedArchError, NoGpuError, LaunchError.

Run a library attention kernel: cubridge.kernels.attention(...) or a
LibraryKernel's attention(...), or LibraryKernel.launchable(...) (an
AttentionKernel) + register(kernel) -> key, then
torch.ops.cubridge.attention_fwd(q, k, v, aux, scale, key) (has a fake impl,
so it traces under torch.compile). cubridge's own callers use
attention_op.call_attention_fwd, which runs the op's body directly for eager
calls on plain tensors (the op's Python dispatch costs ~100 us a call) and the
op otherwise.
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
