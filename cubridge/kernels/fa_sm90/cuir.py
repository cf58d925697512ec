"""CuIR of fa_sm90 (fa_sm90.cu): a FlashAttention-3-class forward kernel for
Hopper (sm90), step for step as the CUDA kernel is built.

A persistent grid of min(tiles, num_sms) CTAs over the schedule (`tile_at`):
sections of `section` (batch, head) pairs (launch.schedule_section, about one
wave of tiles), query blocks last-first inside a section. CTA c's first tile is
tile c; each later one it claims from a launch counter (grid + the counter's
value before an atomic add), with its current tile's last key block: tiles go
to CTAs as they free up. A CTA has 1 + block_m / 64 warpgroups:

- producer (warp 0 of warpgroup 0, lane 0 issuing): per tile, its schedule
  index and Q into Q buffer iter % q_buffers (q_full / q_empty), then the walk of its
  key blocks and whether it visits any (q_full's second arrival), then for
  each visited key block (kv_block_range walked from hi - 1 down to lo, blocks
  EMPTY for every consumer's 64 rows skipped; the CUDA's warp classifies 32
  blocks at a time, one per lane, and runs a header's range search 32 split
  points at a time) its BlockInfo (index, last-of-tile flag, kind for each
  consumer's rows) and (batch, K/V head) with K into the ring of `stages`
  slots (k_full / k_empty). Past the last tile it claims, it writes index -1
  into the next Q buffer's word and completes its q_full with both arrivals and
  no copy, then ends the V loader: index -1 in the next ring slot's BlockInfo,
  k_full completed with a plain arrival. The producer evaluates every block
  hook; the consumers read its classification;
- V loader (warp 1 of warpgroup 0): in lockstep with the ring, once a block's K
  has landed it reads the slot's words, arrives on k_empty (the producer
  rewrites them two blocks on, so k_empty counts it beside the consumers) and
  loads the block's V when its V slot frees (v_full / v_empty): no V waits
  behind the producer's walk of the next tile, and no K behind a V slot;
- consumers (warpgroups 1.., 64 query rows each), in the CUDA's order:
  CTA's first tile: S = Q K^T of its first block alone. Per tile: finish the
  first block (release K, logits, softmax, P); per further block: take the mma
  token, S of this block, PV of the previous one (the tile's first PV
  overwrites O), pass the token, wait_group(1), release K, logits, softmax,
  wait_group(0), release V, rescale O if a row max moved, P. Then release Q,
  open the next tile (wait for its Q buffer's word: index -1 ends the CTA) and
  issue the last PV with the next tile's first S under one token hold,
  epilogue, wait_group(0) for that S. With one Q buffer (q_buffers=1, D = 256
  and QK/V head dims 192/128: two Q tiles, the ring and O's staging tile do not
  fit shared memory) the CUDA
  stages O in the tile's own Q buffer, so the last PV goes alone, then the
  epilogue, then the consumer's Q rows are released and its rows of the next
  tile awaited, its first S alone. Each consumer's rows have a Q slot of their
  own there (q_full / q_empty / words per consumer): the producer loads the next
  tile's first K, then each consumer's rows once that consumer released them, so
  one consumer opens the next tile while the other still stores.

Softmax in exp2 with the lazy rescale: a row max moves only when a block raises
it by more than RESCALE_THRESHOLD (CUBRIDGE_RESCALE_THRESHOLD, log2 units). A
consumer masks a block by the kind the producer found for its own 64 rows: tail
blocks and PARTIAL ones (with a mask_mod) are masked, a block EMPTY for its rows
but visited by the CTA is masked whole. The variant enters through the hooks
only (docs/hooks.md).

Counts are in the IR's units: a worker is a warpgroup and arrives once on an
mbarrier (one elected thread), so the empty barriers (q_empty, k_empty,
v_empty) expect one arrival per consumer where the CUDA initialises them to
4 * consumers and each warp's lane 0 arrives once; a phase completes when every
consumer is done in both. The mma tokens are named barriers of 256 threads (the
taker's warpgroup syncs, the passer's arrives), as in the CUDA; the last
consumer's first pass is one more than consumer 0 takes, so token 0 ends the CTA
mid-phase as on the GPU (`open_at_exit`).

What the IR leaves out (the same values either way): Q, K and V arrive as one
TMA box each instead of 64-column panels on the same barrier; the epilogue
writes O from registers instead of staging it in shared memory for a TMA store
(o_s is allocated so that the shared-memory budget counts it, with two Q buffers;
the epilogue's
named barriers, proxy fence and store waits go with the staging; the CUDA's
1024-byte tile alignment is not counted); `moved` is decided per warpgroup, not
per warp (rows that keep their max have factor 1 either way); with two
consumers the CUDA's steady blocks first take P against the max as it stands
and a warp keeps it when every row has a max and no thread's partial sum of P
passes 2**RESCALE_THRESHOLD (CUBRIDGE_KEEP_MAX_BY_SUMS: no max reduction),
else it reduces the max: a block so kept is one the threshold rule keeps, with
the same P, so the IR applies the rule alone; mask_mod's
staged reads (key-only reads loaded by the producer warp beside K, query-only
ones into registers per tile; with them a consumer releases K after masking)
are the hook's own reads moved, not modelled (the CUDA loads a tile's query-only
ones before the previous tile's epilogue; where a masked block's staged key values
change at most once, a header with key runs, kRunIntervals, has its bits set as
ranges: the same pairs); score_mod's pair reads (a 16-bit aux at [..., k],
CUBRIDGE_HOOKS_PAIR_READS) are copied per warp into shared memory by cp.async when
a steady block's K has landed (into O's staging rows at D = 128) and read back with
ldmatrix after the wait: the hook's own reads moved, the same values (a tile's first
block reads them from global memory, as the IR does everywhere); with a header whose
block tables are precomputed
(CUBRIDGE_HOOKS_BLOCK_TABLE) and at most 64 key blocks, the CUDA producer walks
every key block instead of first taking kv_block_range: the same blocks visited,
EMPTY ones skipped; an index-only mask_mod
(CUBRIDGE_HOOKS_MASK_INDEX_ONLY) is evaluated by the CUDA into per-thread bits
before the block's S product is issued and applied after it retires (a header
with row intervals, kRowIntervals, sets each row's bits as ranges), where
the IR masks the scores (`scores`) after the wait: the same pairs either way;
setmaxnreg and the swizzled layouts have no IR form (warps 2-3 of warpgroup 0
exit at once and are not bound here). The CUDA's last CTA to
finish zeroes the tile counter for the next launch on its stream (a second
element counts finished CTAs); every IR launch starts with a fresh counter.
The IR runs CTAs one after another, so CTA 0 claims every tile past the first
wave: one of the assignments the GPU may make, with the same outputs.
"""

from __future__ import annotations

import torch

from cubridge.ir import RMEM, SMEM, BlockKind, PipelineState
from cubridge.ir import tile_math as tm
from cubridge.ir.attention import AttentionKernelBase
from cubridge.ir.control import cdiv
from cubridge.ir.errors import ProgramError, caller_loc

ROWS_PER_CONSUMER = 64  # wgmma's M: the query rows of one consumer warpgroup
RESCALE_THRESHOLD = 12.0  # CUBRIDGE_RESCALE_THRESHOLD (log2 units)
TOKEN_THREADS = 256  # an mma token barrier: the taker's warpgroup and the passer's
# The launcher's schedule (launch.schedule_section), which passes `section` to the
# kernel. Library CuIR imports only cubridge.ir, torch and math (the LLM sandbox's
# allow-list), so it is restated here; tests/kernels/test_fa_sm90_cuir.py checks
# that the two agree.
L2_SECTION_BYTES = 24 << 20
SECTION_WAVES = 1


class OpenTile:
    """A consumer's view of one tile: where it is, its Q buffer and Q slot (whose
    barriers and words it waits on and reads), and whether it visits any key block
    (the producer's words, read after Q landed)."""

    def __init__(self, t: int, b: int, h: int, m_block: int, qb: int, qs: int, live: bool):
        self.t, self.b, self.h, self.m_block, self.qb, self.qs = t, b, h, m_block, qb, qs
        self.live = live


class BlockInfo:
    """What the producer passes with a key block (the CUDA's BlockInfo word): its
    index, whether it is the tile's last, and its kind for the reading consumer."""

    def __init__(self, n: int, last: bool, kind: BlockKind):
        self.n, self.last, self.kind = n, last, kind


class PendingPv:
    """The block whose PV product is next: its ring slot, its P (operand dtype)
    and whether the product accumulates (False for a tile's first: it overwrites O)."""

    def __init__(self, index: int, phase: int, p: torch.Tensor, accumulate: bool):
        self.index, self.phase, self.p, self.accumulate = index, phase, p, accumulate


class FaSm90(AttentionKernelBase):
    """Hopper-style forward attention: TMA producer, wgmma consumer warpgroups."""

    arch = "sm90"

    def __init__(self, *, block_m: int = 128, block_n: int = 128, stages: int = 2,
                 q_buffers: int = 2, num_sms: int = 132, causal: bool = False):
        for name, val in (("block_m", block_m), ("block_n", block_n), ("stages", stages),
                          ("q_buffers", q_buffers), ("num_sms", num_sms)):
            if not isinstance(val, int) or val <= 0:
                raise ValueError(f"FaSm90: {name} must be a positive int, got {val!r}")
        if block_m % ROWS_PER_CONSUMER or block_m // ROWS_PER_CONSUMER not in (2, 3):
            raise ValueError(f"FaSm90: block_m={block_m} must be 2 or 3 consumer warpgroups "
                             f"of {ROWS_PER_CONSUMER} rows")
        if stages < 2:
            raise ValueError(f"FaSm90: stages must be >= 2 (K/V ring slots), got {stages}")
        if q_buffers not in (1, 2):
            raise ValueError(f"FaSm90: q_buffers must be 1 or 2, got {q_buffers}")
        self.block_m = block_m
        self.block_n = block_n
        self.stages = stages
        # CUBRIDGE_Q_BUFFERS: with two the next tile's Q loads while this one runs; with
        # one (D = 256) O is staged in the tile's own Q buffer, released after its store
        self.q_buffers = q_buffers
        self.num_sms = num_sms
        self.causal = bool(causal)

    @property
    def consumers(self) -> int:
        """Consumer warpgroups: 64 query rows each."""
        return self.block_m // ROWS_PER_CONSUMER

    # -- the tile schedule ----------------------------------------------------------------

    def num_m_blocks(self) -> int:
        return cdiv(self.seqlen_q, self.block_m)

    def num_tiles(self) -> int:
        return self.batch * self.heads_q * self.num_m_blocks()

    def grid(self) -> tuple[int, int, int]:
        return min(self.num_tiles(), self.num_sms), 1, 1

    def section(self) -> int:
        """(batch, head) pairs per schedule section, as launch.schedule_section
        computes it (whole GQA groups; about one wave of tiles; never more K/V
        than the L2 budget)."""
        group = self.heads_q // self.heads_kv
        kv_bytes = (self.seqlen_k * (self.head_dim + self.head_dim_v) * self.dtype.itemsize
                    * self.heads_kv // self.heads_q)  # per query head
        wave_heads = max(1, round(self.grid()[0] / max(self.num_m_blocks(), 1))) * SECTION_WAVES
        budget = max(1, L2_SECTION_BYTES // max(kv_bytes * group, 1))
        return group * max(1, min(-(-wave_heads // group), budget))

    def tile_at(self, t: int) -> tuple[int, int, int]:
        """Tile t of the schedule as (b, h, m_block): sections of `section()`
        (batch, head) pairs, query blocks last-first inside a section, then heads."""
        section, m_blocks = self.section(), self.num_m_blocks()
        per_section = section * m_blocks
        sec = t // per_section
        r = t - sec * per_section
        bh0 = sec * section
        sec_size = min(section, self.batch * self.heads_q - bh0)
        mi = r // sec_size
        bh = bh0 + (r - mi * sec_size)
        return bh // self.heads_q, bh % self.heads_q, m_blocks - 1 - mi

    def key_walk(self, b: int, h: int, m_block: int) -> list[tuple[int, list[BlockKind]]]:
        """The key blocks a tile visits, from hi - 1 down to lo, each with its kind
        for every consumer's rows; blocks EMPTY for every consumer are skipped
        (the producer classifies per consumer only, as the CUDA's KeyWalk, whose
        warp classifies 32 blocks at a time, one per lane: the same blocks and
        kinds as this walk, one round of block hooks per 32 blocks)."""
        q_start = m_block * self.block_m
        q_end = min(q_start + self.block_m, self.seqlen_q)
        lo, hi = self.kv_block_range(b, h, q_start, q_end)
        lo, hi = max(int(lo), 0), min(int(hi), -(-self.seqlen_k // self.block_n))
        out = []
        for n in range(hi - 1, lo - 1, -1):
            kinds = [self.consumer_kind(b, h, q_start + ROWS_PER_CONSUMER * c, n)
                     for c in range(self.consumers)]
            if any(k is not BlockKind.EMPTY for k in kinds):
                out.append((n, kinds))
        return out

    def consumer_kind(self, b: int, h: int, row0: int, n: int) -> BlockKind:
        """Key block n's kind for the 64 rows from row0 (EMPTY past Sq), as the
        producer classifies it for that consumer."""
        k_start = n * self.block_n
        k_end = min(k_start + self.block_n, self.seqlen_k)
        q_end = min(row0 + ROWS_PER_CONSUMER, self.seqlen_q)
        kind = (self.block_kind(b, h, row0, q_end, k_start, k_end) if row0 < q_end
                else BlockKind.EMPTY)
        if not isinstance(kind, BlockKind):
            raise ProgramError(f"block_kind returned {kind!r}, not a BlockKind", loc=caller_loc())
        return kind

    def consumer_block(self, row0: int, info: BlockInfo) -> tuple[BlockKind, bool]:
        """How a consumer treats a block of the producer's kind for its 64 rows
        (the CUDA's `classify`): (the kind its scores are masked as, whether it
        is masked whole). Tail blocks and PARTIAL ones are masked (mask_mod where
        the hooks have one); a block EMPTY for these rows is masked whole."""
        k_start = info.n * self.block_n
        all_masked = info.kind is BlockKind.EMPTY
        tail = k_start + self.block_n > self.seqlen_k or row0 + ROWS_PER_CONSUMER > self.seqlen_q
        masked = all_masked or (self.has_mask_mod and info.kind is BlockKind.PARTIAL)
        return (BlockKind.PARTIAL if tail or masked else BlockKind.FULL), all_masked

    # -- the CTA ----------------------------------------------------------------------------

    def run(self, cta: int, _y: int, _z: int) -> None:  # blockIdx.x; y and z are 0
        # Q and K tiles are head_dim wide, V and O's head_dim_v (CUBRIDGE_HEAD_DIM_V)
        d, dv, st, c = self.head_dim, self.head_dim_v, self.stages, self.consumers
        qbufs = self.q_buffers
        self.q_s = self.alloc(SMEM, (self.block_m, d), self.dtype, stages=qbufs)
        self.k_s = self.alloc(SMEM, (self.block_n, d), self.dtype, stages=st)
        self.v_s = self.alloc(SMEM, (self.block_n, dv), self.dtype, stages=st)
        # the epilogue's staging tile of the CUDA's TMA store (budget only, see above;
        # with one Q buffer the CUDA stages O in it)
        if qbufs > 1:
            self.o_s = self.alloc(SMEM, (self.block_m, dv), self.dtype)
        # the producer's words: per ring slot the BlockInfo of the block it holds
        # (index, last-of-tile, kind per consumer), per Q buffer whether its tile
        # visits any key block
        self.info_s = self.alloc(SMEM, (2 + c,), torch.int32, stages=st, name="block_info")
        # and the (batch, K/V head) of the block, for the V loader
        self.kv_s = self.alloc(SMEM, (2,), torch.int32, stages=st, name="kv_batch_head")
        # Q slots (barriers and words): one per Q buffer, or with one buffer one per
        # consumer's rows of it (CUDA: kQSlots)
        q_slots = c if qbufs == 1 else qbufs
        self.live_s = self.alloc(SMEM, (1,), torch.int32, stages=q_slots, name="tile_live")
        self.index_s = self.alloc(SMEM, (1,), torch.int32, stages=q_slots, name="tile_index")
        # [next, done]: the tiles claimed past each CTA's first (done: see above)
        self.tile_counter = self.launch_counter("tile_counter", 2)
        self.q_full = self.barriers(q_slots, 2)  # Q's bytes, then the tile's liveness
        # CUDA: 4 * c (one buffer: 4), one arrival per warp
        self.q_empty = self.barriers(q_slots, 1 if qbufs == 1 else c)
        self.k_full = self.barriers(st, 1)
        self.k_empty = self.barriers(st, c + 1)  # the V loader too; CUDA: 4 * c + 1
        self.v_full = self.barriers(st, 1)
        self.v_empty = self.barriers(st, c)  # CUDA: 4 * c
        # mma_token[i]: consumer i may issue its gemms; consumer i - 1 passes it. The
        # last consumer's first pass is never matched at the end: open at exit.
        self.mma_token = [self.named_barrier(TOKEN_THREADS, f"mma_token{i}", open_at_exit=True)
                          for i in range(c)]
        self.bind(self.producer, cta, warps=1)
        self.bind(self.v_loader, warps=1)
        for i in range(c):
            self.bind(self.consumer, i, cta, warpgroup=1 + i, name=f"consumer{i}")

    def claim_tile(self) -> int:
        """The schedule index of this CTA's next tile (>= num_tiles: none)."""
        return self.grid()[0] + self.atomic_add(self.tile_counter, 0, 1)

    # -- producer warpgroup -----------------------------------------------------------------

    def producer(self, cta: int) -> None:
        bn, c = self.block_n, self.consumers
        slot = PipelineState(self.stages, phase=1)  # fresh empty barriers: the first pass is free

        def load_k(b: int, h: int, n: int, kinds: list[BlockKind], last: bool) -> None:
            """K of block n, with its BlockInfo and (batch, K/V head)."""
            i = slot.index
            self.k_empty[i].wait(slot.phase)
            h_kv = self.kv_head(h)
            self.store(self.info_s[i], torch.tensor([n, int(last), *map(int, kinds)],
                                                    dtype=torch.int32))
            self.store(self.kv_s[i], torch.tensor([b, h_kv], dtype=torch.int32))
            self.k_full[i].arrive_expect_tx(self.k_s[i].nbytes)
            self.copy_async(self.k_s[i], self.k.tile(b, h_kv, start=n * bn, rows=bn),
                            self.k_full[i])
            slot.advance()

        qbufs = self.q_buffers
        rows = ROWS_PER_CONSUMER

        def load_q_rows(b: int, h: int, m_block: int, t: int, it: int, live: bool) -> None:
            """One Q buffer: each consumer's rows of tile t, once that consumer's
            store of the previous tile has read them (its own Q slot)."""
            for wg in range(c):
                if it >= 1:
                    self.q_empty[wg].wait((it - 1) & 1)
                self.store(self.index_s[wg], torch.tensor([t], dtype=torch.int32))
                self.store(self.live_s[wg], torch.tensor([int(live)], dtype=torch.int32))
                dst = self.q_s[0].rows(wg * rows, rows)
                self.q_full[wg].arrive_expect_tx(dst.nbytes)
                self.copy_async(dst, self.q.tile(b, h, start=m_block * self.block_m + wg * rows,
                                                 rows=rows), self.q_full[wg])
                self.q_full[wg].arrive()

        t, it = cta, 0  # a CTA's first tile is its own index
        while True:
            b, h, m_block = self.tile_at(t)
            qb = it % qbufs
            if qbufs > 1:
                if it >= qbufs:  # the consumers released this buffer's previous tile
                    self.q_empty[qb].wait((it // qbufs - 1) & 1)
                # Q goes out before the walk (which may read tables); the tile's
                # liveness completes q_full with its second arrival
                self.store(self.index_s[qb], torch.tensor([t], dtype=torch.int32))
                self.q_full[qb].arrive_expect_tx(self.q_s[qb].nbytes)
                self.copy_async(self.q_s[qb],
                                self.q.tile(b, h, start=m_block * self.block_m,
                                            rows=self.block_m), self.q_full[qb])
            walk = self.key_walk(b, h, m_block)
            if qbufs > 1:
                self.store(self.live_s[qb], torch.tensor([int(bool(walk))], dtype=torch.int32))
                self.q_full[qb].arrive()
            t_next = None
            for j, (n, kinds) in enumerate(walk):
                last = j == len(walk) - 1
                if last:  # the next tile, claimed with this one's last block
                    t_next = self.claim_tile()
                load_k(b, h, n, kinds, last)
                if qbufs == 1 and j == 0:  # Q's rows after the tile's first K
                    load_q_rows(b, h, m_block, t, it, True)
            if qbufs == 1 and not walk:
                load_q_rows(b, h, m_block, t, it, False)
            if t_next is None:  # (a tile without live blocks)
                t_next = self.claim_tile()
            it += 1
            if t_next >= self.num_tiles():  # no next tile: say so in the next Q slot(s)
                if qbufs == 1:
                    for wg in range(c):
                        self.q_empty[wg].wait((it - 1) & 1)
                        self.store(self.index_s[wg], torch.tensor([-1], dtype=torch.int32))
                        self.q_full[wg].arrive()
                        self.q_full[wg].arrive()  # (both of q_full's arrivals)
                else:
                    qe = it % qbufs
                    if it >= qbufs:
                        self.q_empty[qe].wait((it // qbufs - 1) & 1)
                    self.store(self.index_s[qe], torch.tensor([-1], dtype=torch.int32))
                    self.q_full[qe].arrive()
                    self.q_full[qe].arrive()  # (both of q_full's arrivals)
                # and to the V loader, in the next ring slot once its last K is released
                self.k_empty[slot.index].wait(slot.phase)
                self.store(self.info_s[slot.index],
                           torch.tensor([-1] + [0] * (1 + c), dtype=torch.int32))
                self.k_full[slot.index].arrive()
                return
            t = t_next

    def v_loader(self) -> None:
        bn = self.block_n
        slot = PipelineState(self.stages)  # in lockstep with the producer's K
        while True:
            i = slot.index
            self.k_full[i].wait(slot.phase)  # the block's K landed: its words are there
            n = int(self.load(self.info_s[i])[0])
            if n < 0:  # the producer's end of loads
                return
            b, h_kv = (int(x) for x in self.load(self.kv_s[i]))
            self.k_empty[i].arrive()  # (the producer may rewrite the words now)
            self.v_empty[i].wait(slot.phase ^ 1)  # (fresh: the first pass is free)
            self.v_full[i].arrive_expect_tx(self.v_s[i].nbytes)
            self.copy_async(self.v_s[i], self.v.tile(b, h_kv, start=n * bn, rows=bn),
                            self.v_full[i])
            slot.advance()

    # -- consumer warpgroups ----------------------------------------------------------------

    def consumer(self, wg: int, cta: int) -> None:
        rows, bn, dv = ROWS_PER_CONSUMER, self.block_n, self.head_dim_v
        s_acc = self.alloc(RMEM, (rows, bn), torch.float32)
        o_acc = self.alloc(RMEM, (rows, dv), torch.float32)
        slot = PipelineState(self.stages)  # in lockstep with the producer's walk

        def take_token() -> None:
            self.mma_token[wg].sync()

        def pass_token() -> None:  # hand the tensor cores to the next consumer
            self.mma_token[(wg + 1) % self.consumers].arrive()

        def take_k() -> BlockInfo:  # K of the current slot landed, its info, the token
            self.k_full[slot.index].wait(slot.phase)
            word = self.load(self.info_s[slot.index])
            take_token()
            return BlockInfo(int(word[0]), bool(word[1]), BlockKind(int(word[2 + wg])))

        def gemm_qk(q) -> None:  # S = Q K^T of the current slot's block
            self.gemm_async(q, self.k_s[slot.index], s_acc, trans_b=True, accumulate=False)
            self.commit()

        def gemm_pv(prev: PendingPv) -> None:  # O (+)= P V of the pending block
            self.gemm_async(prev.p, self.v_s[prev.index], o_acc, accumulate=prev.accumulate)
            self.commit()

        def issue(q, prev: PendingPv | None) -> BlockInfo:
            """S of the current slot's block, with the PV product of `prev` (None:
            a tile's first block, whose S is awaited whole); the block's info."""
            info = take_k()
            gemm_qk(q)
            if prev is not None:
                self.v_full[prev.index].wait(prev.phase)
                gemm_pv(prev)
            pass_token()
            self.wait_group(1 if prev is not None else 0)  # S(n) ready; PV may be in flight
            return info

        def finish(b: int, h: int, row0: int, softmax, info: BlockInfo,
                   prev: PendingPv | None) -> PendingPv:
            """The block's S has retired: its logits and softmax, the PV of `prev`
            retired and O rescaled if a row max moved; returns the block's PV."""
            self.k_empty[slot.index].arrive()
            kind, all_masked = self.consumer_block(row0, info)
            q_idx = tm.iota(row0, rows)[:, None]
            s, allowed = self.scores(s_acc, b, h, q_idx, info.n, kind, all_masked=all_masked)
            p, rescale = self.normalize(softmax, s, allowed)
            if prev is not None:
                self.wait_group(0)  # PV of the previous block retired: release its V slot
                self.v_empty[prev.index].arrive()
                if rescale is not None and softmax.moved:  # the lazy rescale
                    self.store(o_acc, self.load(o_acc) * rescale[:, None])
            pv = PendingPv(slot.index, slot.phase, tm.convert(p, self.dtype), prev is not None)
            slot.advance()
            return pv

        def last_pv_alone(prev: PendingPv) -> None:
            """A tile's last PV product, with no next S product beside it."""
            self.v_full[prev.index].wait(prev.phase)
            take_token()
            gemm_pv(prev)
            pass_token()
            self.wait_group(0)
            self.v_empty[prev.index].arrive()

        def open_tile(it: int) -> OpenTile | None:
            """The it-th tile of this CTA: wait for its Q slot; None: no more."""
            qb = it % self.q_buffers
            one = self.q_buffers == 1
            qs = wg if one else qb
            self.q_full[qs].wait(it & 1 if one else (it // self.q_buffers) & 1)
            t = int(self.load(self.index_s[qs])[0])
            if t < 0:
                return None
            b, h, m_block = self.tile_at(t)
            return OpenTile(t, b, h, m_block, qb, qs, bool(self.load(self.live_s[qs])[0]))

        def q_rows(tile: OpenTile):
            return self.q_s[tile.qb].rows(wg * rows, rows)

        if wg == self.consumers - 1:
            pass_token()  # the last consumer hands the first token to consumer 0
        self.store(o_acc, tm.full((rows, dv), 0.0))  # O defined once, before any wgmma
        it = 0
        cur = open_tile(it)
        first = issue(q_rows(cur), None) if cur.live else None  # the CTA's first tile
        while True:
            b, h, m_block = cur.b, cur.h, cur.m_block
            row0 = m_block * self.block_m + wg * rows
            softmax = self.softmax_state(rows, RESCALE_THRESHOLD)
            live = cur.live
            prev: PendingPv | None = None
            if live and first is not None:  # the first block's S is ready
                prev = finish(b, h, row0, softmax, first, None)
                info = first
                while not info.last:  # steady state, to the producer's last block
                    info = issue(q_rows(cur), prev)
                    prev = finish(b, h, row0, softmax, info, prev)
            if self.q_buffers == 1:
                # O is staged in this tile's Q buffer: the last PV, the epilogue, and
                # Q released after its store; then the next tile's first S alone
                if prev is not None:
                    last_pv_alone(prev)
                self.epilogue(softmax, o_acc, b, h, row0, rows)
                self.q_empty[cur.qs].arrive()
                nxt = open_tile(it + 1)
                first = issue(q_rows(nxt), None) if nxt is not None and nxt.live else None
                if nxt is None:
                    break
                cur, it = nxt, it + 1
                continue
            self.q_empty[cur.qs].arrive()  # this tile's Q is no longer read here

            # The next tile, opened now so that its first S is issued with this
            # tile's last PV (the cases of the CUDA, each straight-line there).
            nxt = open_tile(it + 1)
            next_live = nxt is not None and nxt.live
            first = None
            if prev is not None and nxt is not None and next_live:  # the common case
                self.v_full[prev.index].wait(prev.phase)
                first = take_k()
                gemm_pv(prev)
                gemm_qk(q_rows(nxt))
                pass_token()
                self.wait_group(1)  # the last PV retired; the next tile's S is in flight
                self.v_empty[prev.index].arrive()
            elif prev is not None:  # the CTA's last tile, or the next visits no block
                last_pv_alone(prev)
            elif nxt is not None and next_live:  # this tile visits no block
                first = issue(q_rows(nxt), None)
            self.epilogue(softmax, o_acc, b, h, row0, rows)
            if live and next_live:
                self.wait_group(0)  # the next tile's first S, retired before the paths join
            if nxt is None:
                break
            cur, it = nxt, it + 1
