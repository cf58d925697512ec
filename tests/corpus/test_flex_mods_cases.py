"""The three FlexAttention mods issue 16 names, each through cubridge as written:
Flamingo's cross-attention mask with its tensors as spec aux, attention-gym's
document mask with captured tensors, and Morton-order NATTEN's bit operations;
and `cubridge run` refusing mods that disagree with the reference, at the
mod's line, before any stage after the spec check."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cubridge.attention import HeadConfig, Shape
from cubridge.cli import main
from cubridge.kernels import get_kernel
from cubridge.lower.cuda_render import render_body
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline.route import choose_path
from cubridge.spec import from_mods, load
from cubridge.spec.check import check_spec
from cubridge.spec.mods import elementwise_mask
from cubridge.transfer.block_table import build_block_table
from cubridge.transfer.rules import transfer_by_rules
from cubridge.transfer.torch_render import grid_function
from cubridge.transfer.trace import trace_mask_mod

masks = pytest.importorskip("attn_gym.masks", reason="attention-gym (pip install attn-gym)")
FLAMINGO = Path(__file__).with_name("specs") / "flamingo_aux.py"


def _per_element(mask_mod, sq, sk, b=1, h=1):
    idx = [torch.arange(n, dtype=torch.int32) for n in (b, h, sq, sk)]
    return elementwise_mask(mask_mod)(*idx)


def _traced_on_grid(traced, sq, sk, aux):
    grid = (torch.zeros(1, 1, 1, 1, dtype=torch.long), torch.zeros(1, 1, 1, 1, dtype=torch.long),
            torch.arange(sq).view(1, 1, -1, 1), torch.arange(sk).view(1, 1, 1, -1))
    return grid_function(traced.node)(*grid, **aux).expand(1, 1, sq, sk)


def test_captured_document_mask_lifts_its_tensors_and_tables_come_from_the_trace():
    from attn_gym.masks.document_mask import length_to_offsets

    offsets = length_to_offsets([40, 50, 38], "cpu")
    mask_mod = masks.generate_doc_mask_mod(masks.causal_mask, offsets)
    traced = trace_mask_mod(mask_mod, {})
    captured = dict(traced.captured)
    assert set(captured) == {"document_id", "offsets"} and captured["offsets"] is offsets
    want = _per_element(mask_mod, 128, 128)
    assert torch.equal(_traced_on_grid(traced, 128, 128, captured), want)
    # the plan supplies the captured tensors: a call passes no aux at all
    spec = from_mods(mask_mod=mask_mod, configs=[HeadConfig("c", 2, 1, 64)], seq_lens=[128])
    plan = choose_path(spec, get_kernel("fa_sm90")).plan
    assert plan.classification == "table"
    shape = Shape(1, 2, 1, 128, 128, 64)
    table = plan.block_table(shape, {})
    brute = build_block_table(lambda b, h, q, k: mask_mod(b, h, q, k), shape,
                              *plan.table_block, {}, depends_on_b=False, depends_on_h=False)
    assert torch.equal(table.kinds, brute.kinds) and torch.equal(table.ranges, brute.ranges)
    packed = generate_header(plan).pack_aux({}, shape, "cpu")
    assert any(t is offsets for t in packed)


def test_morton_natten_bit_operations_trace_render_and_classify_by_table():
    mask_mod = masks.generate_morton_natten(16, 8, 3, 3)
    traced = trace_mask_mod(mask_mod, {})
    ops = {n.op for n in traced.node.walk()}
    # (shifts by a constant and masks of low bits are traced as // 2^j and % 2^j, which
    # the hooks render back as >> and &)
    assert {"bitand", "bitor", "floordiv", "mod"} <= ops and "shr" not in ops
    assert torch.equal(_traced_on_grid(traced, 128, 128, {}), _per_element(mask_mod, 128, 128))
    code = "\n".join(render_body(traced.node, {}, {}))
    assert " >> " in code and " & 1431655765" in code  # 0x55555555
    spec = from_mods(mask_mod=mask_mod, configs=[HeadConfig("c", 2, 1, 64)], seq_lens=[128])
    assert choose_path(spec, get_kernel("fa_sm90")).plan.classification == "table"


def test_a_custom_op_named_like_a_torch_op_is_not_that_op():
    torch.library.define("cubridge_test::tanh", "(Tensor x) -> Tensor")
    torch.library.impl("cubridge_test::tanh", "CompositeExplicitAutograd", lambda x: x * 0)

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.ops.cubridge_test.tanh(score)

    from cubridge.transfer.trace import TraceError, trace_score_mod

    with pytest.raises(TraceError, match=r"torch\.ops\.cubridge_test\.tanh"):
        trace_score_mod(score_mod, {})


@pytest.mark.slow
def test_flamingo_with_aux_checks_routes_and_verifies_as_cuir():
    spec = load(FLAMINGO)
    check_spec(spec)  # per-element: `interval = intervals[image_idx]; interval[0]`
    kernel = get_kernel("fa_sm90")
    route = choose_path(spec, kernel)
    assert route.path == "rules" and route.plan.classification == "table"
    shapes = [Shape(1, 2, 2, 65, 129, 128), Shape(2, 2, 2, 200, 127, 128)]
    result = transfer_by_rules(spec, kernel.cuir_class(), shapes=shapes,
                               config=kernel.cuir_config(128), plan=route.plan)
    assert result.report.passed, result.report.summary()


@pytest.mark.slow
def test_run_refuses_mods_that_disagree_with_the_reference_at_the_mods_line(tmp_path, capsys):
    text = FLAMINGO.read_text()
    wrong = text.replace("(q_idx < interval[1])", "(q_idx <= interval[1])")
    assert wrong != text
    path = tmp_path / "flamingo_wrong.py"
    path.write_text(wrong)
    line = wrong.splitlines().index("def mask_mod(b, h, q_idx, kv_idx, *, intervals, "
                                    "image_boundaries):") + 1
    code = main(["run", str(path), "--out", str(tmp_path / "run"), "--no-bench"])
    err = capsys.readouterr().err
    assert code == 1
    assert f"flamingo_wrong.py:{line}: mods disagree with the reference" in err, err
    assert "disagree" in err
    # no stage after the check ran: nothing was transferred or lowered
    assert not (tmp_path / "run" / "target_cuir.py").exists()
    assert not (tmp_path / "run" / "kernel.cu").exists()


SPEC_WITH_CAPTURE = """
import torch
from cubridge.attention import LLAMA2_7B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

CONFIGS = [LLAMA2_7B]
SEQ_LENS = [1024]
DOC = torch.arange(4096) // DOC_LEN   # captured by mask_mod, not an aux


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    allowed = (DOC[q_idx] == DOC[kv_idx]) & (q_idx >= kv_idx)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), allowed, v)


def mask_mod(b, h, q_idx, kv_idx):
    return (DOC[q_idx] == DOC[kv_idx]) & (q_idx >= kv_idx)
"""


def test_a_spec_files_captured_tensor_comes_back_with_its_saved_plan(tmp_path):
    """plan.json cannot hold the tensor: loading a run's plan traces the spec
    again for it, and refuses a spec whose mods now trace differently."""
    from cubridge.transfer.hooks import plan_from_json, plan_hooks

    path = tmp_path / "doc_capture.py"
    path.write_text(SPEC_WITH_CAPTURE.replace("DOC_LEN", "100"))
    spec = load(path)
    plan = plan_hooks(spec)
    assert set(plan.captured) == {"DOC"} and plan.to_json()["captured"][0]["name"] == "DOC"
    again = plan_from_json(plan.to_json(), spec)
    assert torch.equal(again.captured["DOC"], plan.captured["DOC"])
    header = generate_header(again)
    assert [s.source for s in header.slots] == ["captured", "block_kinds", "kv_ranges"]
    path.write_text(SPEC_WITH_CAPTURE.replace("DOC_LEN", "100").replace(
        "return (DOC[q_idx] == DOC[kv_idx]) &", "return (DOC[q_idx] == DOC[kv_idx]) |"))
    changed = load(path)
    with pytest.raises(ValueError, match="trace differently"):
        plan_from_json(plan.to_json(), changed)


def test_grid_evaluations_keep_flexattentions_per_element_meaning():
    """The benchmark's pair count, float64 reference and dense masks evaluate
    mods on grids; a mod written for scalar indices is evaluated per element
    where the grid fails (Flamingo at 2048 x 1920 raised) or disagrees."""
    from cubridge.bench.flops import count_allowed_pairs
    from cubridge.spec.grids import arange, eval_mask, eval_score, index_grid

    intervals = torch.tensor([[0, 70], [20, 100], [90, 128]], dtype=torch.int32) * 4
    mask_mod = masks.generate_vision_cross_attention_mask_mod(intervals, 160)
    sq, sk = 512, 480
    want = _per_element(mask_mod, sq, sk, b=2, h=3)
    grid = index_grid(*(arange(n, "cpu") for n in (2, 3, sq, sk)))
    assert torch.equal(eval_mask(mask_mod, *grid).expand_as(want), want)
    stats = count_allowed_pairs(mask_mod, Shape(2, 3, 3, sq, sk, 64), "cpu", chunk_elements=4096)
    assert stats.allowed_pairs == int(want.sum())

    rows = torch.tensor([[0.5, -1.0], [2.0, 3.0]])  # one row of two biases per head

    def score_mod(score, b, h, q_idx, kv_idx):  # written for scalars: row[0], row[1]
        row = rows[h]
        return score + torch.where(q_idx >= kv_idx, row[0], row[1])

    s = torch.randn(1, 2, 16, 16, dtype=torch.float64)
    b, h, q, k = index_grid(*(arange(n, "cpu") for n in (1, 2, 16, 16)))
    got = eval_score(score_mod, s, b, h, q, k)
    causal = (q >= k).expand(1, 2, 16, 16)
    bias = torch.where(causal, rows[:, 0].view(1, 2, 1, 1), rows[:, 1].view(1, 2, 1, 1))
    assert torch.allclose(got.expand_as(s), s + bias)


def test_a_spec_file_with_mods_alone_takes_the_mods_attention_as_reference(tmp_path):
    """An attention-gym user's spec file: the generators' mods, unchanged, and
    no reference of their own. The mods' attention is the reference; the spec
    check and the route take it like any spec."""
    from torch.nn.attention.flex_attention import flex_attention

    from cubridge.spec.errors import SpecError

    path = tmp_path / "natten_softcap.py"
    path.write_text(
        "from attn_gym.masks import generate_natten\n"
        "from attn_gym.mods import generate_tanh_softcap\n"
        "from cubridge.attention import HeadConfig\n"
        "CONFIGS = [HeadConfig('small', 4, 2, 64)]\n"
        "SEQ_LENS = [128]\n"
        "mask_mod = generate_natten(16, 8, 5, 3)\n"
        "score_mod = generate_tanh_softcap(20)\n")
    spec = load(path)
    assert spec.extra.get("reference_from_mods") and spec.name == "natten_softcap"
    summary = check_spec(spec)  # raises SpecError on a failure
    assert summary.reference_calls > 0 and summary.mods_max_error is not None
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 4, 128, 64, generator=g, dtype=torch.float64) for _ in range(3))
    out, lse = spec.reference(q, k, v)
    mask = _per_element(masks.generate_natten(16, 8, 5, 3), 128, 128)
    from attn_gym.mods import generate_tanh_softcap
    from torch.nn.attention.flex_attention import create_block_mask

    block_mask = create_block_mask(masks.generate_natten(16, 8, 5, 3), None, None, 128, 128,
                                   device="cpu")
    want = flex_attention(q, k, v, score_mod=generate_tanh_softcap(20), block_mask=block_mask)
    assert mask.sum() > 0 and torch.allclose(out, want, atol=1e-6) and lse.shape == (1, 4, 128)
    route = choose_path(spec, get_kernel("fa_sm90"))
    assert route.path == "rules", route.reason

    empty = tmp_path / "nothing.py"
    empty.write_text("SEQ_LENS = [128]\n")
    with pytest.raises(SpecError, match="nor mask_mod / score_mod"):
        load(empty)
