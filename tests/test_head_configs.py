"""The head configurations of the paper's three models, for specs and `cubridge bench`."""

from __future__ import annotations

import json

import pytest

from cubridge.attention import HEAD_CONFIGS, LLAMA31_405B
from cubridge.cli import main
from cubridge.spec import check_spec, load

SPEC = '''
from cubridge.attention import LLAMA31_405B
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

CONFIGS = [LLAMA31_405B]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
'''


def test_llama31_405b_is_128_q_heads_8_kv_heads_d128():
    assert (LLAMA31_405B.hq, LLAMA31_405B.hk, LLAMA31_405B.d) == (128, 8, 128)
    assert set(HEAD_CONFIGS) == {"llama2_7b", "qwen25_72b", "llama31_405b", "gemma2_9b",
                                 "gemma3_12b", "deepseek_v3", "phi3_mini", "dit_xl"}
    assert {(c.hq, c.hk, c.d) for n, c in HEAD_CONFIGS.items() if n.startswith("gemma")} == {
        (16, 8, 256)}
    deepseek = HEAD_CONFIGS["deepseek_v3"]  # MLA at prefill: its own V head dim
    assert (deepseek.hq, deepseek.hk, deepseek.d, deepseek.head_dim_v) == (128, 128, 192, 128)


@pytest.mark.slow
def test_a_spec_can_use_it(tmp_path):
    path = tmp_path / "causal_405b.py"
    path.write_text(SPEC)
    spec = load(path)
    assert list(spec.configs) == [LLAMA31_405B]
    check_spec(spec)


@pytest.mark.slow
def test_cubridge_bench_knows_it_by_name(tmp_path, capsys):
    spec_file = tmp_path / "tiny_causal.py"
    spec_file.write_text(SPEC.replace("CONFIGS = [LLAMA31_405B]", ""))  # not the spec's own
    argv = ["bench", str(spec_file), "--device", "cpu", "--seq-lens", "16", "--tokens", "16",
            "--configs", "llama31_405b", "--peers", "eager", "--ours", "none",
            "--out-dir", str(tmp_path), "--name", "smoke"]
    assert main(argv) == 0
    data = json.loads((tmp_path / "smoke" / "results.json").read_text())
    (case,) = data["results"]
    assert case["config"] == "llama31_405b" and case["impls"][0]["status"] == "ok"
