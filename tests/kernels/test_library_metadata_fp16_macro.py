"""Generated hooks pick their sigmoid by CUBRIDGE_DTYPE_FP16 (hook_helpers.cuh):
every library kernel must name its fp16 build macro so."""

from cubridge.kernels import list_kernels


def test_every_kernel_compiles_fp16_builds_with_the_macro_the_hooks_read():
    kernels = list_kernels()
    assert kernels
    for kernel in kernels:
        assert kernel.metadata.defines.get("float16") == "CUBRIDGE_DTYPE_FP16", kernel.name
