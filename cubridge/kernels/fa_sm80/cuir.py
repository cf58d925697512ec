"""CuIR of fa_sm80 (fa_sm80.cu): a FlashAttention-2-class forward kernel for
Ampere tensor cores.

One CTA computes one query block of `block_m` rows for one (batch, query
head). A single role of `num_warps` warps does everything: the warps split the
query rows (mma.sync m16n8k16, whole 16-row slabs per warp), Q stays in shared
memory, and K and V stream through `stages` shared-memory slots each (2 in
fa_sm80.cu) with cp.async groups, one tile per group, always committed so the
wait counts never change. With S stages the groups go K V K V ... with K
running S - 1 blocks ahead:

    prologue: [Q + K(n0)] [V(n0)] [K(n1)] ... [V(n_{S-2})] [K(n_{S-1})]
    iteration i (key block n_i, slot i % S):
      copy_wait(2S-2) + sync   K(n_i) landed for every warp
      issue V(n_{i+S-1})       S = Q K^T, hooks, online softmax (P in registers)
      copy_wait(2S-2) + sync   V(n_i) landed, and every warp is done with K's slot
      issue K(n_{i+S})         O += P V

Every load is issued at least a full phase before it is needed. The variant enters
through the hooks only (docs/hooks.md): kv_block_range bounds the key loop,
EMPTY blocks are never loaded, FULL blocks are unmasked except at the key
tail, PARTIAL blocks apply mask_mod.

fa_sm80.cu refines the classification per warp (32-row slices, listed for the
whole range before the loop): a warp skips a block EMPTY for its rows and runs
one FULL for its rows unmasked. This program keeps the query-block kind; the
results are the same, since an all-masked block changes no row's max, sum or
output, and a mask that allows everything changes nothing. fa_sm80.cu also
stages mask_mod's key-only and query-only aux reads in shared memory
(docs/hooks.md, "Staged reads"): the same values, read from elsewhere.
"""

from __future__ import annotations

import torch

from cubridge.ir import RMEM, SMEM, BlockKind
from cubridge.ir import tile_math as tm
from cubridge.ir.attention import AttentionKernelBase
from cubridge.ir.control import cdiv


class FaSm80(AttentionKernelBase):
    """Ampere-style forward attention: one role, cp.async double buffering, mma.sync."""

    arch = "sm80"

    def __init__(self, *, block_m: int = 128, block_n: int = 64, num_warps: int = 4,
                 stages: int = 2, causal: bool = False):
        for name, val in (("block_m", block_m), ("block_n", block_n), ("num_warps", num_warps)):
            if not isinstance(val, int) or val <= 0:
                raise ValueError(f"FaSm80: {name} must be a positive int, got {val!r}")
        if not isinstance(stages, int) or stages < 2:
            raise ValueError(f"FaSm80: stages must be an int >= 2 (K/V slots), got {stages!r}")
        self.block_m = block_m
        self.block_n = block_n
        self.num_warps = num_warps
        self.stages = stages
        self.causal = bool(causal)

    def grid(self) -> tuple[int, int, int]:
        return cdiv(self.seqlen_q, self.block_m), self.heads_q, self.batch

    def run(self, m_block: int, h: int, b: int) -> None:
        self.q_s = self.alloc(SMEM, (self.block_m, self.head_dim), self.dtype)
        self.k_s = self.alloc(SMEM, (self.block_n, self.head_dim), self.dtype, stages=self.stages)
        self.v_s = self.alloc(SMEM, (self.block_n, self.head_dim_v), self.dtype,
                              stages=self.stages)
        self.bind(self.attention, m_block, h, b, warps=self.num_warps)

    # -- the one role -------------------------------------------------------------------

    def attention(self, m_block: int, h: int, b: int) -> None:
        bm, bn = self.block_m, self.block_n
        h_kv = self.kv_head(h)
        q_start = m_block * bm
        blocks = self.kv_blocks(b, h, q_start, q_start + bm)
        o_acc = self.alloc(RMEM, (bm, self.head_dim_v), torch.float32)
        s_acc = self.alloc(RMEM, (bm, bn), torch.float32)
        self.store(o_acc, tm.full((bm, self.head_dim_v), 0.0))
        softmax = self.softmax_state(bm)
        q_idx = tm.iota(q_start, bm)[:, None]

        def load_k(i: int, slot: int) -> None:
            if i < len(blocks):
                src = self.k.tile(b, h_kv, start=blocks[i][0] * bn, rows=bn)
                self.copy_async(self.k_s[slot], src)
            self.copy_commit()  # always commit, so wait counts stay fixed

        def load_v(i: int, slot: int) -> None:
            if i < len(blocks):
                src = self.v.tile(b, h_kv, start=blocks[i][0] * bn, rows=bn)
                self.copy_async(self.v_s[slot], src)
            self.copy_commit()

        if blocks:
            self.copy_async(self.q_s, self.q.tile(b, h, start=q_start, rows=bm))
            ahead = self.stages - 1  # K runs this many blocks ahead, V one less
            for i in range(ahead):
                load_k(i, i)
                load_v(i, i)
            load_k(ahead, ahead)
            in_flight = 2 * ahead  # groups younger than the one each wait needs
            for i, (n, kind) in enumerate(blocks):
                slot = i % self.stages
                self.copy_wait(in_flight)  # K(n_i) and Q landed; later tiles may be in flight
                self.sync_threads()
                load_v(i + ahead, (i + ahead) % self.stages)

                self.gemm(self.q_s, self.k_s[slot], s_acc, trans_b=True, accumulate=False)
                s, allowed = self.scores(s_acc, b, h, q_idx, n, kind)
                p, rescale = self.normalize(softmax, s, allowed)
                if rescale is not None:
                    self.store(o_acc, self.load(o_acc) * rescale[:, None])

                self.copy_wait(in_flight)  # V(n_i) landed; later tiles may be in flight
                self.sync_threads()  # ... and every warp is done reading K(n_i)'s slot
                load_k(i + ahead + 1, slot)
                self.gemm(tm.convert(p, self.dtype), self.v_s[slot], o_acc)
        self.copy_wait(0)
        self.epilogue(softmax, o_acc, b, h, q_start, bm)


__all__ = ["FaSm80", "BlockKind"]
