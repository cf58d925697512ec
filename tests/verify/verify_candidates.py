"""Kernel-like candidates for the verifier tests: a tiled online-softmax
attention in fp32 (what a FlashAttention kernel computes), with switches that
plant one classic bug each. Module-level so that isolated workers can import
them by name."""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch

TILE = 64


@dataclass(frozen=True)
class TiledAttention:
    """Causal / windowed / softcapped attention, key tiles of TILE, online
    softmax in fp32, P rounded to the input dtype before PV (like a kernel)."""

    causal: bool = True
    window: int | None = None
    softcap: float | None = None
    # planted bugs
    off_by_one_causal: bool = False
    wrong_scale: bool = False
    skip_softcap: bool = False
    drop_partial_tile: bool = False
    lse_base2: bool = False
    leave_last_rows: bool = False
    nan_on_empty_rows: bool = False
    gqa_modulo: bool = False
    scale_q_in_place: bool = False

    def __call__(self, q, k, v, scale=None, out=None, lse=None):
        b, hq, sq, d = q.shape
        hk, sk = k.shape[1], k.shape[2]
        scale = scale if scale is not None else 1 / math.sqrt(d)
        if self.wrong_scale:
            scale = 1 / d
        if self.scale_q_in_place:
            q.mul_(1.0)  # "harmless", but writes to the input
            q[..., 0, 0] += 1
        heads = torch.arange(hq)
        kv_heads = heads % hk if self.gqa_modulo else heads // (hq // hk)
        k32, v32 = k.float()[:, kv_heads], v.float()[:, kv_heads]
        q32 = q.float()
        q_idx = torch.arange(sq)[:, None]
        m = torch.full((b, hq, sq, 1), -math.inf)
        l = torch.zeros(b, hq, sq, 1)
        acc = torch.zeros(b, hq, sq, v.shape[-1])
        last = (sk // TILE) * TILE if self.drop_partial_tile else sk
        for start in range(0, last, TILE):
            stop = min(start + TILE, last)
            s = (q32 @ k32[:, :, start:stop].transpose(-1, -2)) * scale
            if self.softcap is not None and not self.skip_softcap:
                s = self.softcap * torch.tanh(s / self.softcap)
            kv_idx = torch.arange(start, stop)[None, :]
            allowed = torch.ones(sq, stop - start, dtype=torch.bool)
            if self.causal:
                allowed &= (q_idx > kv_idx) if self.off_by_one_causal else (q_idx >= kv_idx)
            if self.window is not None:
                allowed &= q_idx - kv_idx < self.window
            s = s.masked_fill(~allowed, -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            if self.nan_on_empty_rows:
                safe = m_new  # the classic bug: -inf - (-inf) = NaN on rows with no key
            else:
                safe = torch.where(torch.isinf(m_new), 0.0, m_new)
            p = torch.exp(s - safe)
            alpha = torch.exp(m - safe)
            l = l * alpha + p.sum(-1, keepdim=True)
            acc = acc * alpha + p.to(q.dtype).float() @ v32[:, :, start:stop]
            m = m_new
        o = torch.where(l > 0, acc / l, 0.0) if not self.nan_on_empty_rows else acc / l
        row_lse = (m + torch.log(l)).squeeze(-1)
        if self.lse_base2:
            row_lse = row_lse / math.log(2)
        o = o.to(q.dtype)
        if out is None:
            return o, row_lse
        rows = (sq // TILE) * TILE if self.leave_last_rows else sq
        out[:, :, :rows] = o[:, :, :rows]
        if lse is not None:
            lse.copy_(row_lse)
        return None


def zeros_impl(q, k, v, scale=None):
    return torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype), None


def raising_impl(q, k, v, scale=None):
    raise RuntimeError("kernel launch failed: invalid configuration")


def exiting_impl(q, k, v, scale=None):
    os._exit(3)  # a hard crash: no exception, no cleanup


def hanging_impl(q, k, v, scale=None):
    time.sleep(60)


def network_impl(q, k, v, scale=None):
    import socket
    socket.create_connection(("example.com", 80), timeout=1)
    return TiledAttention()(q, k, v, scale)


def eager_causal(q, k, v, scale=None):
    return TiledAttention()(q, k, v, scale)


def cuda_fault_on_short_rows(q, k, v, scale=None):
    """A device-side assert (a sticky CUDA error) when Sq < 8, else correct."""
    if q.shape[2] < 8:
        index = torch.tensor([10**9], device=q.device)
        torch.zeros(4, device=q.device)[index] = 1.0  # out of bounds on the device
        torch.cuda.synchronize()
    out, lse = TiledAttention()(q.cpu(), k.cpu(), v.cpu(), scale)
    return out.to(q.device), lse.to(q.device)
