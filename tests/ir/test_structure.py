"""Printer, structural diff, the `cubridge ir` commands, and docs/cuir.md freshness."""

from __future__ import annotations

from pathlib import Path

import pytest

from cubridge.cli import main
from cubridge.ir import docgen
from cubridge.ir.structure import diff_kernels, outline, pick_kernel, show
from cubridge.kernels.fa_sm80 import cuir as sm80_module
from cubridge.kernels.fa_sm90 import cuir as sm90_module
from cubridge.kernels.fa_sm90.cuir import FaSm90

SM90 = sm90_module.__file__
SM80 = sm80_module.__file__

HOOK_VARIANT = '''
from cubridge.kernels.fa_sm90.cuir import FaSm90


class AlibiCausal(FaSm90):
    """ALiBi: a score_mod with an aux tensor; everything else inherited."""

    aux_names = ("slopes",)

    def score_mod(self, s, b, h, q_idx, kv_idx):
        return s + self.aux["slopes"][h] * (kv_idx - q_idx)
'''

WORKER_VARIANT = '''
from cubridge.kernels.fa_sm90.cuir import FaSm90


class NoPingPong(FaSm90):
    def consumer(self, wg, m_block, h, b):
        # a different consumer: the structure changes, not just the hooks
        return super().consumer(wg, m_block, h, b)
'''


def test_outline_finds_roles_and_synchronisation() -> None:
    o = outline(FaSm90)
    roles = {name: m.role for name, m in o.methods.items()}
    assert roles["producer"] == "worker" and roles["consumer"] == "worker"
    assert roles["run"] == "setup"
    assert o.config == {"block_m": 128, "block_n": 128, "stages": 2, "q_buffers": 2,
                        "num_sms": 132, "causal": False}
    text = show(FaSm90)
    assert "self.k_empty[i].wait(slot.phase)" in text
    assert "self.gemm_async(q, self.k_s[slot.index], s_acc, trans_b=True" in text


def test_diff_of_a_hook_only_variant_says_it_stays_inside_hooks(tmp_path: Path) -> None:
    path = tmp_path / "alibi.py"
    path.write_text(HOOK_VARIANT)
    d = diff_kernels(FaSm90, pick_kernel(path))
    assert d.added == ["score_mod"] and not d.changed and not d.removed
    assert d.attributes == {"aux_names": ((), ("slopes",))}
    assert d.hooks_only
    assert "change stays inside hooks: yes" in str(d)


def test_diff_of_a_worker_change_needs_llm_lowering(tmp_path: Path) -> None:
    path = tmp_path / "worker.py"
    path.write_text(WORKER_VARIANT)
    d = diff_kernels(FaSm90, pick_kernel(path))
    assert d.changed == ["consumer"] and not d.hooks_only
    assert "changed method consumer (worker)" in str(d)
    assert "change stays inside hooks: no" in str(d)


def test_diff_ignores_comments_and_docstrings(tmp_path: Path) -> None:
    src = Path(SM90).read_text().replace("# hand the tensor cores to the other consumer", "")
    path = tmp_path / "same.py"
    path.write_text(src.replace('"""Hopper-style forward attention', '"""Reworded'))
    d = diff_kernels(FaSm90, pick_kernel(path))
    assert d.identical and d.hooks_only


@pytest.mark.slow
def test_cli_show_diff_check(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ir", "show", SM80]) == 0
    assert "worker attention" in capsys.readouterr().out
    path = tmp_path / "alibi.py"
    path.write_text(HOOK_VARIANT)
    assert main(["ir", "diff", SM90, str(path)]) == 1
    out = capsys.readouterr().out
    assert "added method score_mod (hook)" in out and "inside hooks: yes" in out
    assert main(["ir", "diff", SM90, SM90]) == 0
    assert main(["ir", "check", SM90]) == 0
    assert "FaSm90 on sm90: OK" in capsys.readouterr().out
    assert main(["ir", "check", SM90, "--arch", "sm80", "--head-dim", "64"]) == 1
    assert "does not exist on sm80" in capsys.readouterr().err
    assert main(["ir", "show", str(tmp_path / "missing.py")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_docs_cuir_md_is_generated_and_fresh() -> None:
    text = docgen.render()
    assert docgen.DOC_PATH.read_text() == text, (
        "docs/cuir.md is stale: run python -m cubridge.ir.docgen")
    for needle in ("### `KernelBase.copy_async(", "### `Barrier.arrive_expect_tx(",
                   "### `KernelBase.gemm_async(", "### `tile_math.exp2(",
                   "### `KernelBase.block_kind(", "class FaSm90(AttentionKernelBase)"):
        assert needle in text


def test_check_reports_what_the_target_must_hold() -> None:
    from cubridge.ir import check
    from cubridge.kernels.fa_sm80.cuir import FaSm80

    # D=128 bf16: Q 2 x, K and V 2 x, O staging 128x128; 12 mbarriers; the producer's
    # BlockInfo and (batch, K/V head) rings, tile-liveness and tile-index words (each
    # allocation rounded up to 128 bytes)
    r = check(FaSm90)
    tile = 128 * 128 * 2
    assert r.smem_bytes == tile * 7 + 12 * 8 + 4 * 128 and r.smem_limit == 227 * 1024
    # (warps 2-3 of the producer warpgroup exit at once)
    assert r.workers == [("producer", 1), ("v_loader", 1), ("consumer0", 4), ("consumer1", 4)]
    assert r.gemms == [("wgmma", 64, 128, 128)]
    assert ("k_empty[1]", 3) in r.barriers  # (the consumers and the V loader)
    r80 = check(FaSm80, head_dim=64)
    assert r80.smem_bytes == 128 * 64 * 2 + 2 * 2 * 64 * 64 * 2
    assert set(r80.gemms) == {("mma.sync", 128, 64, 64)}
