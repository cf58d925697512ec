"""Self-attention specs (SELF_ATTENTION = True): one per-position tensor read at both
q_idx and kv_idx, as FlexAttention's document masking is written. Every shape a check or
verifier makes is square, the aux dim S names the length, and shapes with Sq != Sk are
refused with an error that says why; a spec without the flag that raises on such a shape
is told about it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cubridge.attention import Shape
from cubridge.spec import SpecError, check_spec, load
from cubridge.spec.inputs import make_aux
from cubridge.spec.shapes import fit_shapes, verification_shapes

BODY = '''\
import torch
from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention
CONFIGS = [HeadConfig("tiny", 4, 2, 16)]
{flag}AUX_SHAPES = {{"doc": ("B", "{dim}")}}


def make_aux(shape, generator, device):
    n = shape.sk
    cuts = torch.randint(1, 8, (shape.b, n), generator=generator)
    return {{"doc": (torch.cumsum(cuts, dim=1) // 40).to(torch.int32)}}


def reference(q, k, v, doc):
    qi, ki = positions(q, k)
    same = doc[:, None, :q.shape[2], None] == doc[:, None, None, :k.shape[2]]
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), same & (qi >= ki), v)


def mask_mod(b, h, q_idx, kv_idx, *, doc):
    return (doc[b, q_idx] == doc[b, kv_idx]) & (q_idx >= kv_idx)
'''


def _spec_file(tmp_path: Path, flag: bool, dim: str = "Sk") -> Path:
    path = tmp_path / "docs_one_tensor.py"
    path.write_text(BODY.format(flag="SELF_ATTENTION = True\n" if flag else "", dim=dim))
    return path


def test_a_self_attention_spec_with_one_position_tensor_checks_at_sq_equal_sk(tmp_path):
    spec = load(_spec_file(tmp_path, True, dim="S"))
    assert spec.self_attention
    summary = check_spec(spec)
    assert summary.shapes and all(s.sq == s.sk for s in summary.shapes)
    assert all(s.sq == s.sk for s in summary.long_shapes)
    assert summary.mods_max_error < 1e-8


def test_without_the_flag_the_error_says_what_to_declare(tmp_path):
    spec = load(_spec_file(tmp_path, False))
    with pytest.raises(SpecError, match=r"Sq = \d+ != Sk = \d+: a spec for self-attention only"
                       r".*SELF_ATTENTION = True"):
        check_spec(spec)


def test_the_dim_s_needs_the_flag(tmp_path):
    with pytest.raises(SpecError, match="names S, the sequence length of a self-attention"):
        load(_spec_file(tmp_path, False, dim="S"))


def test_the_flag_must_be_a_bool(tmp_path):
    path = tmp_path / "flag.py"
    path.write_text(BODY.format(flag="SELF_ATTENTION = 'yes'\n", dim="Sk"))
    with pytest.raises(SpecError, match="SELF_ATTENTION = 'yes'"):
        load(path)


def test_shapes_are_made_square_for_self_attention_only(tmp_path):
    spec = load(_spec_file(tmp_path, True))
    sweep = verification_shapes(spec.configs)
    assert any(s.sq != s.sk for s in sweep)
    square = fit_shapes(spec, sweep)
    assert all(s.sq == s.sk for s in square) and len(set(square)) == len(square)
    assert {max(s.sq, s.sk) for s in sweep} == {s.sq for s in square}
    (tmp_path / "other").mkdir()
    other = load(_spec_file(tmp_path / "other", False))
    assert fit_shapes(other, sweep) == sweep


def test_a_self_attention_spec_refuses_sq_unequal_sk(tmp_path):
    spec = load(_spec_file(tmp_path, True))
    with pytest.raises(SpecError, match="self-attention spec .* takes Sq = Sk"):
        make_aux(spec, Shape(1, 4, 2, 33, 65, 16), torch.Generator().manual_seed(0))


def test_a_compiled_self_attention_variant_refuses_sq_unequal_sk(tmp_path):
    from cubridge.kernels import get_kernel
    from cubridge.kernels.library import KernelBuild
    from cubridge.pipeline.variant import CompiledVariant

    spec = load(_spec_file(tmp_path, True))
    variant = CompiledVariant(spec, get_kernel("fa_sm90"), [KernelBuild(16)])
    q = torch.zeros(1, 4, 33, 16, dtype=torch.bfloat16)
    kv = torch.zeros(1, 2, 65, 16, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="self-attention spec .* takes Sq = Sk, got Sq = 33"):
        variant(q, kv, kv, doc=torch.zeros(1, 65, dtype=torch.int32))


def test_the_route_and_peer_probes_take_a_self_attention_spec_at_sq_equal_sk(tmp_path):
    """The probes that make small shapes of their own (is the reference plain
    attention? is the score_mod an additive bias?) ask a self-attention spec square
    shapes only."""
    from cubridge.pipeline.route import is_plain_attention
    from cubridge.verify.peers import additive_bias_only

    path = tmp_path / "reference_only.py"
    path.write_text(BODY.format(flag="SELF_ATTENTION = True\n", dim="S").split(
        "\n\ndef mask_mod")[0] + '''

def score_mod(score, b, h, q_idx, kv_idx, *, doc):
    return score + (doc[b, q_idx] == doc[b, kv_idx]) * 0.5
''')
    spec = load(path)
    assert not is_plain_attention(spec)
    assert additive_bias_only(spec)
