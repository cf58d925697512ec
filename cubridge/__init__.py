"""cubridge: from a PyTorch specification of an attention variant to a fast,
verified CUDA kernel, by adapting expert-written kernels (lift -> transfer -> lower).

Parts (see docs/architecture.md): spec, ir, kernels, transfer, lower, build,
verify, bench, llm; cli wires them for the user.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cubridge.kernels import LibraryKernel
    from cubridge.pipeline.variant import CompiledVariant

__version__ = "0.1.0"


def compile(spec: str | Path, *, kernel: str | LibraryKernel | None = None,  # noqa: A001
            out: Path | None = None, seed: int | None = None) -> CompiledVariant:
    """The verified kernel of a spec file, ready to call inside a model:

        attention = cubridge.compile("examples/specs/alibi_causal.py")
        out, lse = attention(q, k, v, **aux)

    Runs `cubridge run` without the benchmark (cached in the run directory):
    transfer, IR verification, lowering, compilation and GPU verification.
    Raises if any of them fails or this machine cannot finish them
    (NvccNotFoundError, NoGpuError from cubridge.build.errors). `kernel`: the
    library entry (name or object); default: the one
    `cubridge.kernels.select_kernel` picks for this GPU and the spec."""
    from cubridge.pipeline.run import RunOptions, run  # `import cubridge` stays light

    result = run(spec, RunOptions(kernel=kernel, out=out, bench=False, seed=seed))
    if result.stopped:  # (NoGpuError, NvccNotFoundError: RuntimeErrors both)
        raise result.stop_error(f"cubridge.compile({spec}): {result.stopped}")
    if result.kernel is None:
        raise RuntimeError(f"cubridge.compile({spec}): no kernel produced")
    return result.kernel


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,  # noqa: ANN001, ANN201
                   enable_gqa=False, return_lse=False, kernel_options=None, *,
                   return_aux=None, mask_mod=None, kernel=None):
    """FlexAttention's call (torch.nn.attention.flex_attention.flex_attention),
    answered by a cubridge kernel compiled and verified for the mods on first
    use; works under torch.compile(fullgraph=True). See cubridge.pipeline.flex."""
    from cubridge.pipeline.flex import flex_attention as run  # `import cubridge` stays light

    return run(query, key, value, score_mod, block_mask, scale, enable_gqa, return_lse,
               kernel_options, return_aux=return_aux, mask_mod=mask_mod, kernel=kernel)
