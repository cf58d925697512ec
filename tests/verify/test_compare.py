"""The judge's handling of outputs below what the output dtype can hold."""

import torch

from cubridge.spec.model import Tolerance
from cubridge.verify.compare import judge

TOL = Tolerance(rel=2e-3, abs=4e-3)


def _judge(out, ref, dtype=torch.float16):
    v = torch.randn(1, 2, 200, 128)
    return judge(out, None, ref, None, v, dtype, TOL, require_lse=False)


def test_reference_below_the_dtype_range_passes_as_weak():
    # sigmoid of very negative scores: every element ~1e-20, not representable in fp16
    ref = torch.full((1, 2, 1, 128), 1e-20, dtype=torch.float64)
    j = _judge(torch.zeros(1, 2, 1, 128, dtype=torch.float16), ref)
    assert j.passed and j.weak  # right, but it cannot tell a trivial output apart


def test_zeros_still_fail_against_a_representable_reference():
    ref = torch.randn(1, 2, 5, 128, dtype=torch.float64)
    j = _judge(torch.zeros(1, 2, 5, 128, dtype=torch.float16), ref)
    assert not j.passed and not j.weak
    assert j.rel_err == 1.0


def test_small_but_representable_errors_still_count():
    ref = torch.full((1, 2, 4, 128), 1e-2, dtype=torch.float64)
    out = (ref * 1.01).to(torch.float16)  # 1% off, far above fp16's floor
    assert not _judge(out, ref).passed
