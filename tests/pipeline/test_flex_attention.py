"""cubridge.flex_attention on the CPU: its argument checks, and that under
torch.compile(fullgraph=True) it becomes one cubridge::attention_fwd call that
a second call reuses (the kernel itself is stood in for: compiling and
launching it needs a GPU, tests/pipeline/test_flex_attention_gpu.py)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

import cubridge
from cubridge.attention import Shape
from cubridge.build import attention_op
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline import flex


def _doc_mask(n: int, per_doc: int = 24):
    doc = torch.arange(n) // per_doc  # captured, as attention-gym's document mask has it

    def mask_mod(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    return mask_mod, doc


class _StandIn:
    """Stands in for a compiled kernel: plain softmax attention, recording the
    aux slots it was given."""

    def __init__(self) -> None:
        self.aux: list[list[torch.Tensor]] = []

    def run(self, q, k, v, scale, aux, out, lse) -> None:  # noqa: ANN001
        self.aux.append(list(aux))
        s = (q.float() @ k.float().transpose(-1, -2)) * scale
        lse.copy_(torch.logsumexp(s, -1))
        out.copy_(torch.softmax(s, -1) @ v.float())


@pytest.fixture
def stand_in(monkeypatch):
    """flex's preparation without a GPU: the real trace, hook plan, header and
    aux packing (block tables included); a stand-in kernel."""
    kernel = _StandIn()
    builds = []

    def build_call(score_mod, mask_mod, shape, dtype, device, kernel_name):
        builds.append(shape)
        _, _, plan = flex.plan_call(score_mod, mask_mod, shape, dtype, "sm_90a", kernel_name)
        header = generate_header(plan)
        found = flex._Kernel(None, "stand-in", [])  # type: ignore[arg-type]
        call = flex._Call(plan, header, found, shape, torch.device("cpu"), [])
        call.packed = call.pack()
        return call

    monkeypatch.setattr(flex, "_build_call", build_call)
    monkeypatch.setattr(flex, "check_inputs", lambda *a, **kw: None)
    monkeypatch.setitem(attention_op._KERNELS, "stand-in", kernel)
    monkeypatch.setattr(flex, "_CALLS", type(flex._CALLS)())
    monkeypatch.setattr(flex, "_BY_MODS", type(flex._BY_MODS)())
    return kernel, builds


def _qkv(sq=96, sk=96, h=2):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(1, h, sq, 64, generator=g), torch.randn(1, h, sk, 64, generator=g),
            torch.randn(1, h, sk, 64, generator=g))


def test_compiled_fullgraph_is_one_op_and_the_second_call_reuses_it(stand_in):
    kernel, builds = stand_in
    mask_mod, doc = _doc_mask(96)
    q, k, v = _qkv()
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda q, k, v: cubridge.flex_attention(q, k, v, mask_mod=mask_mod),
                             fullgraph=True, backend=backend)
    out = compiled(q, k, v)
    out2 = compiled(q, k, v)
    assert len(graphs) == 1 and len(builds) == 1  # no recompilation, no second build
    ops = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert ops.count(torch.ops.cubridge.attention_fwd) == 1
    assert torch.equal(out, out2) and out.shape == (1, 2, 96, 64)
    # the captured document ids and the block tables reach the kernel
    assert len(kernel.aux[0]) == 3 and torch.equal(kernel.aux[0][0], doc)
    assert kernel.aux[0][1].dtype == torch.uint8  # block kinds


def test_eager_calls_reuse_the_prepared_call_and_new_closures_retrace(stand_in):
    kernel, builds = stand_in
    mask_mod, _ = _doc_mask(96)
    q, k, v = _qkv()
    out, lse = cubridge.flex_attention(q, k, v, mask_mod=mask_mod, return_lse=True)
    cubridge.flex_attention(q, k, v, mask_mod=mask_mod)
    assert len(builds) == 1 and lse.shape == (1, 2, 96)
    again, _ = _doc_mask(96)  # a new closure: traced again (the kernel is shared by form)
    cubridge.flex_attention(q, k, v, mask_mod=again)
    assert len(builds) == 2


def test_flex_attentions_aux_request_and_kernel_options_are_taken(stand_in):
    from torch.nn.attention.flex_attention import AuxOutput, AuxRequest

    mask_mod, _ = _doc_mask(96)
    q, k, v = _qkv()
    out, aux = cubridge.flex_attention(q, k, v, mask_mod=mask_mod,
                                       kernel_options={"BLOCK_M": 64},
                                       return_aux=AuxRequest(lse=True))
    assert isinstance(aux, AuxOutput) and aux.lse.shape == (1, 2, 96)
    with pytest.raises(flex.FlexAttentionError, match="row maxima"):
        cubridge.flex_attention(q, k, v, mask_mod=mask_mod,
                                return_aux=AuxRequest(max_scores=True))


def test_short_sequences_with_captured_tensors_of_their_length(stand_in):
    """The trace is checked on the call's own lengths (a captured tensor of 16
    positions is never indexed past them)."""
    _, builds = stand_in
    mask_mod, _ = _doc_mask(16, per_doc=5)
    out = cubridge.flex_attention(*_qkv(sq=16, sk=16), mask_mod=mask_mod)
    assert out.shape == (1, 2, 16, 64) and len(builds) == 1


def test_block_mask_gives_its_mask_mod(stand_in):
    _, builds = stand_in
    mask_mod, _ = _doc_mask(96)
    q, k, v = _qkv()
    block_mask = create_block_mask(mask_mod, 1, 1, 96, 96, device="cpu")
    cubridge.flex_attention(q, k, v, block_mask=block_mask)
    assert len(builds) == 1


def test_bad_calls_say_what_to_change():
    q, k, v = _qkv()
    with pytest.raises(flex.FlexAttentionError, match="enable_gqa=True"):
        cubridge.flex_attention(q, k[:, :1], v[:, :1])
    with pytest.raises(flex.FlexAttentionError, match="4-D"):
        cubridge.flex_attention(q[0], k[0], v[0])
    mask_mod, _ = _doc_mask(96)
    block_mask = create_block_mask(mask_mod, 1, 1, 96, 96, device="cpu")
    with pytest.raises(flex.FlexAttentionError, match="made for"):
        cubridge.flex_attention(*_qkv(sq=64), block_mask=block_mask)
    bare = BlockMask.from_kv_blocks(block_mask.kv_num_blocks, block_mask.kv_indices)
    with pytest.raises(flex.FlexAttentionError, match="no mask_mod"):
        cubridge.flex_attention(q, k, v, block_mask=bare)
    with pytest.raises(flex.FlexAttentionError, match="not two"):
        cubridge.flex_attention(q, k, v, block_mask=block_mask, mask_mod=lambda b, h, q, k: q >= k)


def test_verification_shape_keeps_the_calls_lengths():
    """Captured tensors may fix the lengths: verification keeps them and cuts heads."""
    got = flex._verify_shape(Shape(8, 64, 8, 777, 1500, 128))
    assert (got.b, got.hq, got.hk, got.sq, got.sk) == (2, 16, 2, 777, 1500)
    assert dataclasses.replace(got, b=1).b == 1


def test_a_call_with_its_own_v_head_dim_plans_on_the_entry_that_builds_it():
    """q/k 192, v 128 (MLA): on sm_90a fa_sm90 builds the pair as it is, so the mods
    trace into its hooks at its 192/128 tile; no GPU needed to plan."""
    shape = Shape(1, 4, 4, 300, 300, 192, 128)
    spec, lib, plan = flex.plan_call(None, lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, shape,
                                     torch.bfloat16, "sm_90a")
    assert lib.name == "fa_sm90" and plan.table_block == (64, 128)
    assert [(c.d, c.head_dim_v) for c in spec.configs] == [(192, 128)]
    with pytest.raises(flex.FlexAttentionError, match="192/128 are not among fa_sm80's"):
        flex.plan_call(None, lambda b, h, q_idx, kv_idx: q_idx >= kv_idx, shape,
                       torch.bfloat16, "sm_80")
