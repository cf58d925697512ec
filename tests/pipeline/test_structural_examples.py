"""The structural variants of the eval suite (examples/specs: learnable_sink,
softmax_one, gated_output, differential, with cosine and mla) take the LLM
path on every library kernel that serves their head dims, for a reason that
names what leaves the hooks, and their transfer prompts show the aux tensors
as the kernel receives them and the spec helpers they call."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubridge.kernels import select_for_spec
from cubridge.llm_path.transfer import transfer_messages
from cubridge.pipeline.route import choose_path
from cubridge.spec import load

SPECS = Path(__file__).resolve().parents[2] / "examples" / "specs"
SUITE = ["learnable_sink", "softmax_one", "gated_output", "differential", "cosine", "mla"]
AUX = {"learnable_sink": "| 0 | `sink` | [Hq] | float32 |",
       "gated_output": "| 0 | `gate` | [B, Hq, Sq] | float32 |",
       "differential": "| 0 | `lam` | [Hq] | float32 |",
       "cosine": "| 0 | `logit_scale` | [Hq] | float32 |"}


@pytest.mark.parametrize("name", SUITE)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_structural_variant_takes_the_llm_path(name, arch):
    spec = load(SPECS / f"{name}.py")
    kernel = select_for_spec(spec, arch)
    route = choose_path(spec, kernel)
    assert route.path == "llm", route.reason
    task = transfer_messages(SPECS / f"{name}.py", kernel)[1].content
    assert "def positions" in task or "def expand_kv" in task
    if name in AUX:
        assert AUX[name] in task
    if name == "differential":
        assert not spec.returns_lse
