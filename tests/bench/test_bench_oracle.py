"""The float64 reference the benchmark verifies against."""

from __future__ import annotations

import pytest
import torch
from bench_specs import causal_mask, make_spec

from cubridge.attention import Shape
from cubridge.bench.oracle import (
    attention_from_mods,
    float64_reference,
    mods_agree_with_reference,
)
from cubridge.spec.mods import bind_mods


def _inputs(shape: Shape, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape.b, shape.hq, shape.sq, shape.d, generator=g, dtype=torch.float64),
            torch.randn(shape.b, shape.hk, shape.sk, shape.d, generator=g, dtype=torch.float64),
            torch.randn(shape.b, shape.hk, shape.sk, shape.d, generator=g, dtype=torch.float64))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["full", "causal", "document_causal", "alibi_causal",
                                  "softcap_causal", "sigmoid_causal"])
def test_chunked_mods_attention_equals_dense_reference(specs, name):
    spec = specs[name]
    shape = Shape(2, 4, 2, 24, 24, 16)
    q, k, v = _inputs(shape)
    aux = dict(spec.make_aux(shape, torch.Generator().manual_seed(1), torch.device("cpu"))) \
        if spec.make_aux else {}
    want = spec.reference(q, k, v, **aux)
    # chunk_elements forces one head per chunk: true head indices must reach the mods.
    got = attention_from_mods(q, k, v, bind_mods(spec, aux), spec.normalizer, None,
                              chunk_elements=24 * 24)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_causal_matches_sdpa_in_float64():
    shape = Shape(1, 2, 2, 33, 33, 16)
    q, k, v = _inputs(shape)
    mods = bind_mods(make_spec("causal", causal_mask), {})
    got = attention_from_mods(q, k, v, mods, "softmax", None)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_agreement_check_accepts_consistent_and_rejects_inconsistent_specs(specs):
    ok, why = mods_agree_with_reference(specs["alibi_causal"], Shape(2, 4, 2, 48, 48, 16), "cpu")
    assert ok, why
    # mask_mod says causal, the reference computes full attention: they disagree.
    lying = make_spec("lying", causal_mask, reference=make_spec("full").reference)
    ok, why = mods_agree_with_reference(lying, Shape(1, 2, 2, 32, 32, 16), "cpu")
    assert not ok and "disagree" in why


def test_reference_falls_back_to_the_spec_when_mods_are_not_trusted():
    lying = make_spec("lying", causal_mask, reference=make_spec("full").reference)
    shape = Shape(1, 2, 2, 16, 16, 16)
    q, k, v = _inputs(shape)
    ref = float64_reference(lying, q, k, v, {}, bind_mods(lying, {}), mods_checked=False)
    assert ref.method.startswith("spec reference")
    full = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(ref.out, full, rtol=1e-10, atol=1e-10)
    assert ref.out.dtype == torch.float64
