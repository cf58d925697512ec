"""The integer interval form of block_kind past its range: tiles with positions
at or beyond 2^24 classify as PARTIAL (conservative), never by wrapped ints;
below it they classify as the double form does."""

from __future__ import annotations

import pytest
from hook_variants import VARIANTS
from host_harness import run_program

from cubridge.lower.hook_header import generate_header
from cubridge.transfer.hooks import plan_hooks

PROGRAM = """#include <cstdio>
#include "hook_types.cuh"
#include "cubridge_hooks.cuh"
using namespace cubridge_hooks;
int main() {
  cubridge::AuxArgs aux{};
  const int big = 1 << 24;
  // (q_start, q_end, k_start, k_end): causal FULL, EMPTY, PARTIAL below 2^24, then past it
  const int tiles[][4] = {{128, 256, 0, 64}, {0, 128, 192, 256}, {64, 128, 64, 128},
                          {big, big + 128, 0, 64}, {big - 128, big, big, big + 64}};
  for (const auto& t : tiles) {
    printf("%d ", static_cast<int>(block_kind(0, 0, t[0], t[1], t[2], t[3], aux)));
  }
  const KvRange r = kv_block_range(0, 0, big, big + 128, 64, (big + 128) / 64, aux);
  printf("%d %d\\n", r.lo, r.hi);
  return 0;
}
"""


@pytest.mark.slow
def test_integer_block_kind_is_conservative_past_2_pow_24(tmp_path):
    header = generate_header(plan_hooks(VARIANTS["causal"]))
    assert "detail::ivi_kind(" in header.text
    out = run_program(header.text, PROGRAM, tmp_path)
    full, empty, partial = "1", "0", "2"
    assert out[:3] == [full, empty, partial]
    # past 2^24: PARTIAL where exact intervals would say FULL / EMPTY
    assert out[3:5] == [partial, partial]
    # the range stays whole (no block proven EMPTY), so no live block is skipped
    assert out[5:] == ["0", str((2**24 + 128) // 64)]
