"""Register budget of fa_sm80 with the generated hook headers of every
docs/benchmark.md variant, for sm_90a (compile only; CI runs this wherever nvcc
exists).

D = 128 sits at the 255-register limit, so generated hooks may spill a few
loop-invariant scalars (reloaded once per key block, measured harmless in
bench/kernels/fa_sm80/PERF.md). The bound below is what the kernel holds
today with nvcc 13.0 (at most about 100 B, in either entry point); before the
per-block mask bits the document masks spilled 420 bytes inside the masked
path, which this test would reject."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from cubridge.kernels import get_kernel
from cubridge.modules import load_module_from_path

fa_sm80 = get_kernel("fa_sm80")
_PERF = load_module_from_path(Path(__file__).resolve().parents[2] / "bench" / "kernels" /
                              "fa_sm80" / "perf.py")
GENERATED_VARIANTS, generated_headers = _PERF.GENERATED_VARIANTS, _PERF.generated_headers

pytestmark = [pytest.mark.nvcc, pytest.mark.slow]

from build_ahead import builds_ahead  # noqa: E402  (tests/, on the path by its conftest)

from cubridge.build.resources import SPILL_BUDGET_BYTES as MAX_SPILL_BYTES  # noqa: E402


def _build(variant: str):
    _, header = generated_headers([variant])[variant]
    return functools.partial(fa_sm80.compile, 128, torch.bfloat16, "sm_90a",
                             hooks_header=header.text)


@pytest.fixture(scope="module")
def variant_builds(request):
    return builds_ahead(request, "test_generated_variant_stays_within_the_register_budget",
                        lambda p: _build(p["variant"]))


@pytest.mark.parametrize("variant", GENERATED_VARIANTS)
def test_generated_variant_stays_within_the_register_budget(variant, variant_builds, request):
    compiled = variant_builds[request.node.callspec.id].result()
    entry = fa_sm80.metadata.entry
    for name in (entry, f"{entry}_long"):
        res = compiled.resources_of(name)
        assert res.registers <= 255
        assert res.spill_bytes <= MAX_SPILL_BYTES, \
            f"{variant} ({name}): {res.spill_bytes} B of spills > {MAX_SPILL_BYTES}: {res}"
