"""Default per-dtype error bounds against the float64 reference.

docs/specs.md gives the reasoning; in short, the bounds sit about 5x above
the error a correct kernel makes (bf16/fp16: rounding of P before the PV
product and of the output; fp32: accumulation), and far below the error of
any trivial output (zeros or the mean of V have relative error near 1).
"""

from __future__ import annotations

import torch

from cubridge.spec.model import Tolerance

DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.bfloat16: Tolerance(rel=1e-2, abs=2e-2, lse=1e-4),
    torch.float16: Tolerance(rel=2e-3, abs=4e-3, lse=1e-4),
    torch.float32: Tolerance(rel=1e-4, abs=2e-4, lse=1e-4),
    torch.float64: Tolerance(rel=1e-10, abs=1e-10, lse=1e-10),
}
