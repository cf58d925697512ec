"""CuIR of a FlashAttention-3-class forward kernel for Hopper (sm90).

One CTA computes one query block of `block_m` = 128 rows for one (batch, query
head) with three warpgroups:

- producer (warpgroup 0): TMA loads. Q once, then K and V of each visited key
  block into a ring of `stages` slots. Each slot has a "full" barrier (1
  arrival: the producer's arrive_expect_tx; completes when the bytes land) and
  an "empty" barrier (2 arrivals: one per consumer, after its last wgmma on
  the slot retired).
- consumer0 / consumer1 (warpgroups 1, 2): 64 query rows each. wgmma for
  S = Q K^T and O += P V with online softmax in between. Within a warpgroup
  the QK^T of block j overlaps the PV of block j-1 (two commit groups,
  wait_group(1) then wait_group(0)); across warpgroups, two named barriers
  take turns so one warpgroup's softmax runs while the other's gemms issue.

Variant logic enters only through the hooks (docs/hooks.md): both roles walk
the same list of visited key blocks (kv_block_range + block_kind, EMPTY
skipped), PARTIAL blocks apply mask_mod, the key tail is always masked.
"""

from __future__ import annotations

import torch

from cubridge.ir import RMEM, SMEM, PipelineState
from cubridge.ir import tile_math as tm
from cubridge.ir.attention import AttentionKernelBase
from cubridge.ir.control import cdiv

CONSUMERS = 2  # MMA warpgroups per CTA


class FaSm90(AttentionKernelBase):
    """Hopper-style forward attention: TMA producer, two wgmma consumer warpgroups."""

    arch = "sm90"

    def __init__(self, *, block_m: int = 128, block_n: int = 128, stages: int = 2,
                 causal: bool = False):
        for name, val in (("block_m", block_m), ("block_n", block_n), ("stages", stages)):
            if not isinstance(val, int) or val <= 0:
                raise ValueError(f"FaSm90: {name} must be a positive int, got {val!r}")
        if block_m % CONSUMERS:
            raise ValueError(f"FaSm90: block_m={block_m} must split over {CONSUMERS} consumers")
        self.block_m = block_m
        self.block_n = block_n
        self.stages = stages
        self.causal = bool(causal)

    def grid(self) -> tuple[int, int, int]:
        return cdiv(self.seqlen_q, self.block_m), self.heads_q, self.batch

    def run(self, m_block: int, h: int, b: int) -> None:
        d, dv, st = self.head_dim, self.head_dim_v, self.stages
        self.q_s = self.alloc(SMEM, (self.block_m, d), self.dtype)
        self.k_s = self.alloc(SMEM, (self.block_n, d), self.dtype, stages=st)
        self.v_s = self.alloc(SMEM, (self.block_n, dv), self.dtype, stages=st)
        self.q_full = self.barrier(1)
        self.k_full = self.barriers(st, 1)
        self.v_full = self.barriers(st, 1)
        self.k_empty = self.barriers(st, CONSUMERS)
        self.v_empty = self.barriers(st, CONSUMERS)
        # mma_turn[i]: consumer i may issue its gemms (the other consumer arrives).
        self.mma_turn = [self.named_barrier(CONSUMERS * 128, f"mma_turn{i}")
                         for i in range(CONSUMERS)]
        self.bind(self.producer, m_block, h, b, warpgroup=0)
        for i in range(CONSUMERS):
            self.bind(self.consumer, i, m_block, h, b, warpgroup=1 + i, name=f"consumer{i}")

    def _blocks(self, m_block: int, h: int, b: int) -> list:
        q_start = m_block * self.block_m
        return self.kv_blocks(b, h, q_start, q_start + self.block_m)

    # -- producer warpgroup -------------------------------------------------------------

    def producer(self, m_block: int, h: int, b: int) -> None:
        bn = self.block_n
        h_kv = self.kv_head(h)
        q_start = m_block * self.block_m
        self.q_full.arrive_expect_tx(self.q_s.nbytes)
        self.copy_async(self.q_s, self.q.tile(b, h, start=q_start, rows=self.block_m), self.q_full)
        slot = PipelineState(self.stages, phase=1)  # fresh empty barriers: the first pass is free
        for n, _kind in self._blocks(m_block, h, b):
            i = slot.index
            self.k_empty[i].wait(slot.phase)
            self.k_full[i].arrive_expect_tx(self.k_s[i].nbytes)
            self.copy_async(self.k_s[i], self.k.tile(b, h_kv, start=n * bn, rows=bn),
                            self.k_full[i])
            self.v_empty[i].wait(slot.phase)
            self.v_full[i].arrive_expect_tx(self.v_s[i].nbytes)
            self.copy_async(self.v_s[i], self.v.tile(b, h_kv, start=n * bn, rows=bn),
                            self.v_full[i])
            slot.advance()

    # -- consumer warpgroups ------------------------------------------------------------

    def consumer(self, wg: int, m_block: int, h: int, b: int) -> None:
        rows, bn, dv = self.block_m // CONSUMERS, self.block_n, self.head_dim_v
        row0 = m_block * self.block_m + wg * rows
        blocks = self._blocks(m_block, h, b)
        q = self.q_s.rows(wg * rows, rows)
        s_acc = self.alloc(RMEM, (rows, bn), torch.float32)
        o_acc = self.alloc(RMEM, (rows, dv), torch.float32)
        self.store(o_acc, tm.full((rows, dv), 0.0))
        softmax = self.softmax_state(rows)
        q_idx = tm.iota(row0, rows)[:, None]
        other = self.mma_turn[1 - wg]

        if wg == 1 and blocks:
            self.mma_turn[0].arrive()  # consumer0 takes the first turn
        self.q_full.wait(0)
        slot = PipelineState(self.stages)
        prev: PipelineState | None = None  # slot of the block whose PV is pending
        p_prev = None
        for j, (n, kind) in enumerate(blocks):
            self.k_full[slot.index].wait(slot.phase)
            self.mma_turn[wg].sync()
            self.gemm_async(q, self.k_s[slot.index], s_acc, trans_b=True, accumulate=False)
            self.commit()
            if prev is not None:
                self.v_full[prev.index].wait(prev.phase)
                self.gemm_async(p_prev, self.v_s[prev.index], o_acc)
                self.commit()
            if wg == 0 or j + 1 < len(blocks):
                other.arrive()  # hand the tensor cores to the other consumer
            self.wait_group(1 if prev is not None else 0)  # S(n) ready; PV may be in flight
            self.k_empty[slot.index].arrive()

            s, allowed = self.scores(s_acc, b, h, q_idx, n, kind)
            p, rescale = self.normalize(softmax, s, allowed)

            if prev is not None:
                self.wait_group(0)  # PV of the previous block retired: release its V slot
                self.v_empty[prev.index].arrive()
            if rescale is not None and prev is not None:
                self.store(o_acc, self.load(o_acc) * rescale[:, None])
            p_prev = tm.convert(p, self.dtype)
            prev = PipelineState(self.stages)
            prev.index, prev.phase = slot.index, slot.phase
            slot.advance()

        if prev is not None:
            self.v_full[prev.index].wait(prev.phase)
            self.gemm_async(p_prev, self.v_s[prev.index], o_acc)
            self.commit()
            self.wait_group(0)
            self.v_empty[prev.index].arrive()
        self.epilogue(softmax, o_acc, b, h, row0, rows)
