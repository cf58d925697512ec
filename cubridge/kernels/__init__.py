"""The expert kernel library: one directory per entry (CUDA source with hook
points, its CuIR program, its spec, metadata.json), each exposed as one
`LibraryKernel` (cubridge.kernels.library); `list_kernels()` lists them and
`choose_kernel(...)` / `select_kernel(...)` pick one for a device and a spec
(cubridge.kernels.selection, with the reason). Shared CUDA pieces
live in common/ (the hook contract, docs/hooks.md); the launch ABI the
entries share is cubridge.kernels.abi."""

from cubridge.kernels.library import (
    KERNEL_DIRS_ENV,
    KERNELS_DIR,
    KernelBuild,
    KernelMetadata,
    LibraryKernel,
    TileConfig,
    get_kernel,
    kernel_names,
    list_kernels,
    load_kernel,
    read_metadata,
    register_kernel,
    unregister_kernel,
)
from cubridge.kernels.selection import (
    Selection,
    attention,
    choose_for_spec,
    choose_kernel,
    select_for_spec,
    select_kernel,
)

__all__ = [
    "KERNELS_DIR", "KERNEL_DIRS_ENV", "KernelBuild", "KernelMetadata", "LibraryKernel",
    "Selection", "TileConfig", "attention", "choose_for_spec", "choose_kernel",
    "get_kernel", "kernel_names", "list_kernels", "load_kernel", "read_metadata",
    "register_kernel", "select_for_spec", "select_kernel", "unregister_kernel",
]
