"""The verifier passes SDPA and FlexAttention (CPU, eager) on every spec they
can express, and the spec's own reference (eager peer) on every spec."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubridge.attention import Shape
from cubridge.spec import load
from cubridge.verify import verify
from cubridge.verify.peers import Unsupported, eager_impl, flex_impl, sdpa_impl

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"
SPECS = sorted(p.stem for p in SPEC_DIR.glob("*.py"))
ELEMENTWISE = {"relu_causal", "sigmoid_causal", "comb_prefix_softcap_sigmoid",
               "relu_squared_causal", "sigmoid_log_bias"}
# a softcap is not a bias: SDPA cannot take it
NOT_ADDITIVE = {"softcap_causal", "softcap_sliding_window", "gemma2_global", "gemma2_local"}
NO_MODS = {"cosine", "mla", "learnable_sink", "softmax_one", "gated_output",
           "differential"}  # references beyond what mods describe


def shapes_for(spec) -> list[Shape]:
    """Few heads and D 32 keep eager peers fast (FlexAttention eager on CPU
    is slow); the GQA ratio of the spec's last config; tails on both sides of
    64/128 tiles; Sq > Sk (documents then leave rows with no allowed key)."""
    cfg = spec.configs[-1]
    group = min(cfg.hq // cfg.hk, 4)
    d, dv = (48, 32) if cfg.dv is not None else (32, None)
    return [Shape(2, 2 * group, 2, 65, 129, d, dv), Shape(1, group, 1, 200, 67, d, dv)]


def expected_support(name: str, peer: str) -> bool:
    if name in ELEMENTWISE or name in NO_MODS:
        return False
    return not (peer == "sdpa" and name in NOT_ADDITIVE)


@pytest.mark.slow
@pytest.mark.parametrize("name", SPECS)
@pytest.mark.parametrize("peer", ["sdpa", "flex"])
def test_peer_passes_every_spec_it_can_express(name, peer):
    spec = load(SPEC_DIR / f"{name}.py")
    factory = sdpa_impl if peer == "sdpa" else flex_impl
    if not expected_support(name, peer):
        with pytest.raises(Unsupported):
            factory(spec)
        return
    report = verify(spec, factory(spec), shapes=shapes_for(spec), dtypes=["bf16"], seed=7,
                    require_lse=peer == "flex")
    assert report.passed, report.table()


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(ELEMENTWISE | NO_MODS))
def test_eager_reference_passes_specs_no_library_peer_expresses(name):
    spec = load(SPEC_DIR / f"{name}.py")
    report = verify(spec, eager_impl(spec), shapes=shapes_for(spec)[:1], seed=3,
                    require_lse=False)
    assert report.passed, report.table()
