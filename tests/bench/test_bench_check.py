"""The gate before timing: only an output matching the float64 reference counts."""

from __future__ import annotations

import pytest
import torch

from cubridge.bench.check import check_output
from cubridge.spec.model import Tolerance

TOL = Tolerance(rel=1e-2, abs=2e-2)


def _case():
    g = torch.Generator().manual_seed(0)
    v = torch.randn(1, 2, 8, 16, generator=g).to(torch.bfloat16)
    ref = torch.randn(1, 2, 8, 16, generator=g, dtype=torch.float64)
    return v, ref


def test_right_output_passes_and_reports_errors():
    v, ref = _case()
    c = check_output(ref.to(torch.bfloat16), ref, v, TOL)
    assert c.ok and 0 < c.rel_err < 1e-2 and c.max_abs > 0


@pytest.mark.slow
def test_trivial_nan_misshapen_and_wrong_dtype_outputs_fail():
    v, ref = _case()
    zeros = check_output(torch.zeros_like(ref, dtype=torch.bfloat16), ref, v, TOL)
    assert not zeros.ok and zeros.rel_err == 1.0 and "relative error" in zeros.reason
    nan = ref.to(torch.bfloat16).clone()
    nan[0, 1, 3, 5] = float("nan")
    bad = check_output(nan, ref, v, TOL)
    assert not bad.ok and "NaN" in bad.reason and bad.rel_err is None
    assert "shape" in check_output(ref[..., :8].to(torch.bfloat16), ref, v, TOL).reason
    assert "expected torch.bfloat16" in check_output(ref.float(), ref, v, TOL).reason
    assert not check_output((ref, None), ref, v, TOL).ok


def test_a_failure_only_on_rows_with_no_allowed_key_says_so():
    """An implementation that returns, say, the mean of V on a query row with no
    allowed key (varlen padding), where the spec's reference has 0: the check still
    fails (the output is not the spec's) and its reason names those rows."""
    v, ref = _case()
    ref[0, 1, 5:] = 0.0  # three padded rows of head 1
    out = ref.to(torch.bfloat16).clone()
    out[0, 1, 5:] = v[0, 1].float().mean(dim=0).to(torch.bfloat16)
    c = check_output(out, ref, v, TOL)
    assert not c.ok and "only on the 3 query rows with no allowed key" in c.reason
    out[0, 0, 2, 4] += 1.0  # a wrong allowed row too: no such note
    c = check_output(out, ref, v, TOL)
    assert not c.ok and "no allowed key" not in c.reason
