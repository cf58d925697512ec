"""Mods: binding aux for FlexAttention, and the mods-only evaluator."""

from __future__ import annotations

from pathlib import Path

import torch

from cubridge.attention import Shape
from cubridge.spec import bind_mods, call_reference, dense_mask, load, make_inputs, mods_attention
from cubridge.spec.shapes import eval_dim, reduced_heads, validate_dim, verification_shapes

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"


def test_bound_mods_take_flex_signatures_and_read_aux():
    spec = load(SPEC_DIR / "relative_position.py")
    shape = Shape(1, 2, 1, 5, 7, 16)
    inputs = make_inputs(spec, shape, torch.float64, "normal", torch.Generator().manual_seed(0))
    mods = bind_mods(spec, inputs.aux)
    b, h, q, k = (torch.tensor(0), torch.tensor(1), torch.tensor(4), torch.tensor(2))
    table, offset = inputs.aux["rel_table"], int(inputs.aux["rel_offset"])
    assert float(mods.score_mod(torch.tensor(0.5), b, h, q, k)) == float(
        0.5 + table[1, 4 - 2 + offset])
    assert bool(mods.mask_mod(b, h, q, k)) and not bool(mods.mask_mod(b, h, k, q))


def test_flex_attention_accepts_bound_mods():
    from torch.nn.attention.flex_attention import create_block_mask

    spec = load(SPEC_DIR / "document_causal.py")
    shape = Shape(2, 2, 1, 40, 40, 16)
    inputs = make_inputs(spec, shape, torch.float32, "normal", torch.Generator().manual_seed(0))
    mods = bind_mods(spec, inputs.aux)
    block_mask = create_block_mask(mods.mask_mod, 2, 2, 40, 40, device="cpu")
    dense = dense_mask(mods, 2, 2, 40, 40)
    assert block_mask.to_dense().shape[-2:] == (1, 1)  # one 128-block covers 40x40
    assert dense.shape == (2, 2, 40, 40) and dense.dtype == torch.bool
    assert torch.equal(dense[0, 0].diagonal(), torch.ones(40, dtype=torch.bool))


def test_mods_attention_matches_reference_and_empty_rows():
    spec = load(SPEC_DIR / "sliding_window_1024.py")
    shape = Shape(1, 2, 1, 1100, 40, 16)  # queries >= 40 + 1023 have no key left
    inputs = make_inputs(spec, shape, torch.float64, "scaled", torch.Generator().manual_seed(1))
    out, lse = mods_attention(spec, inputs.q, inputs.k, inputs.v, inputs.aux)
    ref_out, ref_lse = call_reference(spec, inputs)
    assert torch.allclose(out, ref_out, rtol=1e-10, atol=1e-10)
    empty = torch.isinf(lse)
    assert int(empty.sum()) == 2 * (1100 - 1063)
    assert torch.equal(empty, torch.isinf(ref_lse))
    assert torch.all(out[empty] == 0)


def test_mods_attention_weighs_a_row_masked_whole_with_finfo_min_alike(tmp_path):
    """A Hugging Face mask value (finfo.min) on every key of a row: the spec's softmax
    weighs the keys alike (out = mean of V). exp(s - lse) gave each weight 1 (lse =
    C + log(Sk) rounds to C) and the spec check blamed the mods."""
    path = tmp_path / "finfo_window.py"
    path.write_text(
        "import torch\n"
        "from cubridge.attention import HeadConfig\n"
        "from cubridge.spec.helpers import expand_kv, positions, scaled_scores\n"
        "CONFIGS = [HeadConfig('a', 2, 1, 16)]\n"
        "LOW = torch.finfo(torch.float32).min\n"
        "def reference(q, k, v):\n"
        "    q_idx, kv_idx = positions(q, k)\n"
        "    k, v = expand_kv(q, k, v)\n"
        "    scores = scaled_scores(q, k) + torch.where(q_idx - kv_idx < 4, 0.0, LOW)\n"
        "    return torch.softmax(scores, dim=-1) @ v, torch.logsumexp(scores, dim=-1)\n"
        "def score_mod(score, b, h, q_idx, kv_idx):\n"
        "    return score + torch.where(q_idx - kv_idx < 4, 0.0, LOW)\n")
    spec = load(path)
    shape = Shape(1, 2, 1, 12, 5, 16)  # rows q >= 8 keep no key
    inputs = make_inputs(spec, shape, torch.float64, "normal", torch.Generator().manual_seed(1))
    out, lse = mods_attention(spec, inputs.q, inputs.k, inputs.v, inputs.aux)
    ref_out, ref_lse = call_reference(spec, inputs)
    assert torch.allclose(out, ref_out, rtol=1e-10, atol=1e-10)
    assert torch.allclose(out[:, :, 8:], inputs.v.mean(2, keepdim=True).expand(1, 2, 4, 16))
    assert torch.equal(lse[:, :, 8:], ref_lse[:, :, 8:])


def test_reduced_heads_keep_gqa_ratio_and_two_kv_heads():
    from cubridge.attention import LLAMA2_7B, QWEN25_72B
    assert reduced_heads(LLAMA2_7B) == (2, 2)
    assert reduced_heads(QWEN25_72B) == (16, 2)
    shapes = verification_shapes([LLAMA2_7B, QWEN25_72B])
    assert {(s.hq // s.hk) for s in shapes} >= {1, 8}
    assert any(s.sq != s.sk and s.sq > s.sk for s in shapes)
    assert any(s.sq < s.sk for s in shapes)
    assert any(s.sq % 64 and s.sk % 64 for s in shapes)


def test_aux_dim_expressions():
    shape = Shape(2, 8, 2, 10, 7, 16)
    assert eval_dim("Sq + Sk - 1", shape) == 16
    assert eval_dim("Hq // Hk", shape) == 4
    assert validate_dim("Sq + foo") is not None
    assert validate_dim("__import__('os')") is not None
    assert validate_dim(-1) is not None and validate_dim(3) is None


def test_captured_device_finds_a_tensor_in_a_nested_closure_not_on_the_cpu():
    """FlexAttention users capture tensors on their GPU; the evaluators must call
    such a mod with its indices there (a meta tensor stands in for a CUDA one)."""
    from cubridge.spec.mods import captured_device

    doc = torch.zeros(8, dtype=torch.int32, device="meta")
    on_cpu = torch.zeros(8, dtype=torch.int32)

    def inner(q_idx):
        return doc[q_idx]

    def mask_mod(b, h, q_idx, kv_idx):
        return inner(q_idx) == inner(kv_idx)

    def cpu_mod(b, h, q_idx, kv_idx):
        return on_cpu[q_idx] == on_cpu[kv_idx]

    scalar = torch.tensor(2)

    def scalar_mod(b, h, q_idx, kv_idx):
        return q_idx - kv_idx < scalar

    assert captured_device(mask_mod) == torch.device("meta")
    # a spec file's table at module level: its mod is called with indices on the CPU
    assert captured_device(cpu_mod) == torch.device("cpu")
    assert captured_device(scalar_mod) is None  # a 0-d tensor mixes with any device
    assert captured_device(None) is None


def test_a_spec_of_mods_alone_may_capture_a_cpu_table(tmp_path):
    """A spec file without a reference whose score_mod reads a module-level table
    (docs/specs.md: captured tensors become aux by themselves) is not blamed for
    a CPU tensor meeting the reference's inputs: its mods run where the table is."""
    from cubridge.spec import check_spec

    path = tmp_path / "captured_table.py"
    path.write_text(
        "import torch\n"
        "from cubridge.attention import HeadConfig\n"
        "CONFIGS = [HeadConfig('c', 4, 4, 64)]\n"
        "slopes = torch.tensor([2.0 ** -(i + 1) for i in range(4)])\n"
        "def score_mod(score, b, h, q_idx, kv_idx):\n"
        "    return score - slopes[h] * (q_idx - kv_idx).abs()\n"
        "def mask_mod(b, h, q_idx, kv_idx):\n"
        "    return q_idx >= kv_idx\n")
    check_spec(load(path))


def test_partial_keywords_are_constants_not_aux(tmp_path):
    """FlexAttention's idiom `functools.partial(sliding, window=200)` makes `window`
    a keyword-only parameter with a default: a constant of the mod, not an aux
    that make_aux must give (it raised AttributeError: partial has no __name__)."""
    from cubridge.spec import check_spec
    from cubridge.spec.mods import aux_parameters
    from cubridge.transfer.trace import trace_mask_mod

    path = tmp_path / "partial_window.py"
    path.write_text(
        "import functools\n"
        "from cubridge.attention import HeadConfig\n"
        "CONFIGS = [HeadConfig('p', 4, 2, 64)]\n"
        "def sliding(b, h, q_idx, kv_idx, window):\n"
        "    return (q_idx >= kv_idx) & (q_idx - kv_idx < window)\n"
        "def band(b, h, q_idx, kv_idx, *, left, right):\n"
        "    return (kv_idx <= q_idx + right) & (q_idx - kv_idx <= left)\n"
        "mask_mod = functools.partial(sliding, window=200)\n"
        "BAND = functools.partial(band, left=30, right=0)\n")
    spec = load(path)
    assert aux_parameters(spec.mask_mod) == []
    assert aux_parameters(spec.mask_mod, ["window"]) == ["window"]  # an aux so named wins
    check_spec(spec)
    band = spec.mask_mod.func.__globals__["BAND"]  # keyword-only with defaults
    assert aux_parameters(band) == []
    for mod in (spec.mask_mod, band):
        trace_mask_mod(mod, {})


def test_a_python_float_times_the_indices_is_not_float32_rounding(tmp_path):
    # `score - 0.1 * (q_idx - kv_idx)`: the float meets int32 indices and would
    # become float32 (torch's default); the check must read it in float64.
    from cubridge.spec import check_spec, load

    path = tmp_path / "const_slope_alibi.py"
    path.write_text(
        "from cubridge.attention import LLAMA2_7B\n"
        "from cubridge.spec.helpers import expand_kv, positions, scaled_scores, "
        "softmax_attention\n"
        "CONFIGS = [LLAMA2_7B]\n"
        "DTYPES = ['bf16']\n"
        "def reference(q, k, v):\n"
        "    q_idx, kv_idx = positions(q, k)\n"
        "    k, v = expand_kv(q, k, v)\n"
        "    scores = scaled_scores(q, k) - 0.1 * (q_idx - kv_idx).to(q.dtype)\n"
        "    return softmax_attention(scores, q_idx >= kv_idx, v)\n"
        "def mask_mod(b, h, q_idx, kv_idx):\n"
        "    return q_idx >= kv_idx\n"
        "def score_mod(score, b, h, q_idx, kv_idx):\n"
        "    return score - 0.1 * (q_idx - kv_idx)\n")
    summary = check_spec(load(path))
    assert summary.mods_max_error < 1e-12
    assert torch.get_default_dtype() == torch.float32  # restored


def test_a_captured_table_is_supplied_under_the_candidates_own_name():
    """verify-ir's line names the target CuIR, not the wrapper that supplies the
    captured tensors ('HookPlan.supplying_captured.<locals>.call')."""
    from cubridge.spec import from_mods
    from cubridge.transfer.hooks import plan_hooks
    from cubridge.verify.candidate import impl_name

    table = torch.arange(8)

    def mask_mod(b, h, q_idx, kv_idx):
        return table[q_idx % 8] >= kv_idx

    def cuir_Target(q, k, v, scale=None, **aux):  # noqa: N802 - as the rules name it
        return q

    plan = plan_hooks(from_mods(mask_mod=mask_mod))
    assert plan.captured
    assert impl_name(plan.supplying_captured(cuir_Target)) == cuir_Target.__qualname__
