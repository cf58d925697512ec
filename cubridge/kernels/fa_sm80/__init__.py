"""fa_sm80: our FlashAttention-2-class forward kernel for Ampere tensor cores
(fa_sm80.cu, its CuIR in cuir.py, its spec in spec.py). It is a plain library
entry: metadata.json says everything `LibraryKernel` needs, so there is no
kernel.py here. Use it through the library:

    from cubridge.kernels import get_kernel
    out, lse = get_kernel("fa_sm80").attention(q, k, v, causal=True)
"""
