"""Which way a call reaches the kernel: eager calls on plain tensors run the
op's body directly (the custom op's Python dispatch costs about as much as a
short kernel); anything that may trace, fake or differentiate the call goes
through `torch.ops.cubridge.attention_fwd`."""

from __future__ import annotations

import pytest
import torch

from cubridge.build import attention_op


@pytest.fixture
def routes(monkeypatch):
    seen: list[str] = []

    def body(q, k, v, aux, scale, key):
        seen.append("body")
        return q.clone(), q.new_zeros(q.shape[:3], dtype=torch.float32)

    def op(*args):
        seen.append("op")
        return torch.ops.cubridge.attention_fwd(*args)

    monkeypatch.setattr(attention_op, "_attention_fwd", body)
    monkeypatch.setattr(attention_op, "_OP", op)
    return seen


def _qkv(requires_grad: bool = False):
    return [torch.randn(1, 2, 8, 16, requires_grad=requires_grad) for _ in range(3)]


def test_eager_plain_tensors_skip_the_op(routes):
    out, lse = attention_op.call_attention_fwd(*_qkv(), [], 0.25, "key")
    assert routes == ["body"] and out.shape == (1, 2, 8, 16) and lse.shape == (1, 2, 8)


def test_inputs_that_require_grad_go_through_the_op(routes):
    attention_op.call_attention_fwd(*_qkv(requires_grad=True), [], 0.25, "key")
    assert routes == ["op", "body"]
    routes.clear()
    with torch.no_grad():  # nothing to differentiate: direct again
        attention_op.call_attention_fwd(*_qkv(requires_grad=True), [], 0.25, "key")
    assert routes == ["body"]


def test_tensor_subclasses_go_through_the_op(routes):
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        q, k, v = (mode.from_tensor(t) for t in _qkv())
        out, lse = attention_op.call_attention_fwd(q, k, v, [], 0.25, "key")
    assert routes == ["op"]  # the op's fake impl answers: no kernel body runs
    assert out.shape == (1, 2, 8, 16) and lse.shape == (1, 2, 8)
