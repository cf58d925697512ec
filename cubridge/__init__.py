"""cubridge: from a PyTorch specification of an attention variant to a fast,
verified CUDA kernel, by adapting expert-written kernels (lift -> transfer -> lower).

Parts (see docs/architecture.md): spec, ir, kernels, transfer, lower, build,
verify, bench, llm; cli wires them for the user.
"""

__version__ = "0.1.0"
