"""The variant library: every example spec loads, passes the spec checks
(including its mods against its reference), and covers docs/benchmark.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cubridge.attention import LLAMA2_7B, QWEN25_72B
from cubridge.spec import check_spec, load

SPEC_DIR = Path(__file__).resolve().parents[2] / "examples" / "specs"
BENCHMARK_VARIANTS = [
    "full", "causal", "sliding_window_1024", "global_sliding_window", "prefix_lm",
    "document_causal", "share_question", "causal_blockwise", "alibi_causal", "softcap_causal",
    "relative_position", "relu_causal", "sigmoid_causal", "comb_prefix_softcap_sigmoid",
]
EXTRA_VARIANTS = ["mqa", "prefix_lm_bidirectional", "dilated_sliding_window", "alibi"]
ALL_VARIANTS = BENCHMARK_VARIANTS + EXTRA_VARIANTS


ALL_SPEC_FILES = sorted(p.stem for p in SPEC_DIR.glob("*.py"))
# Masks that leave rows with no allowed key somewhere in the default sweep (graph_mask:
# queries more than its band past the last key, where Sq > Sk; causal_bottom_right:
# the first Sq - Sk queries, where Sq > Sk).
WITH_EMPTY_ROWS = {"sliding_window_1024", "document_causal", "dilated_sliding_window",
                   "graph_mask", "causal_bottom_right", "softcap_sliding_window", "local_band"}


def test_library_has_every_variant():
    assert set(ALL_VARIANTS) <= set(ALL_SPEC_FILES)


# One spec with aux, a score_mod and a mask_mod stays in the inner loop; each
# full check takes seconds (its long case is past twice the spec's constants).
INNER_LOOP = {"alibi_causal"}


@pytest.mark.parametrize("name", [n if n in INNER_LOOP else pytest.param(n, marks=pytest.mark.slow)
                                  for n in ALL_SPEC_FILES])
def test_every_spec_file_loads_and_checks(name):
    spec = load(SPEC_DIR / f"{name}.py")
    assert spec.name == name and spec.description
    summary = check_spec(spec)
    assert summary.reference_calls > len(summary.shapes)
    assert (summary.empty_rows > 0) == (name in WITH_EMPTY_ROWS)
    if spec.mask_mod is not None or spec.score_mod is not None:
        assert summary.mods_max_error is not None and summary.mods_max_error <= 1e-8


@pytest.mark.parametrize("name", ALL_VARIANTS)
def test_library_variant_conventions(name):
    spec = load(SPEC_DIR / f"{name}.py")
    if name == "mqa":
        assert all(c.hk == 1 for c in spec.configs)
        assert {c.hq for c in spec.configs} == {LLAMA2_7B.hq, QWEN25_72B.hq}
    else:
        assert LLAMA2_7B in spec.configs and QWEN25_72B in spec.configs
    assert torch.bfloat16 in spec.dtypes
    assert list(spec.seq_lens) == [1024, 2048, 4096, 8192]
    # every variant but plain full attention is expressed with mods as well
    assert name == "full" or spec.mask_mod is not None or spec.score_mod is not None
    assert spec.returns_lse == (spec.normalizer == "softmax")
