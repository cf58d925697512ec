"""Conventions every part of cubridge shares about the attention problem.

Layout: q is [B, Hq, Sq, D], k is [B, Hk, Sk, D], v is [B, Hk, Sk, Dv], out is
[B, Hq, Sq, Dv] in the input dtype and lse is [B, Hq, Sq] in float32 (natural
log of the softmax denominator, -inf for a row with no allowed key).

GQA: query head h reads key/value head h // (Hq // Hk); Hq must be a multiple
of Hk (Hk == 1 is MQA).

Positions: q_idx and kv_idx are absolute positions 0..Sq-1 and 0..Sk-1 within
their own sequences (no bottom-right alignment when Sq != Sk): a causal mask
is q_idx >= kv_idx, as in FlexAttention.

Scores are scaled by `scale` (default 1/sqrt(D)) before any score_mod.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class HeadConfig:
    """A model's attention heads: query heads, key/value heads, head dim."""

    name: str
    hq: int
    hk: int
    d: int
    dv: int | None = None  # value head dim, when it differs from d

    def __post_init__(self) -> None:
        if self.hq <= 0 or self.hk <= 0 or self.d <= 0:
            raise ValueError(f"head config {self.name!r}: head counts and dims must be positive")
        if self.hq % self.hk:
            raise ValueError(
                f"head config {self.name!r}: hq={self.hq} is not a multiple of hk={self.hk}"
            )

    @property
    def head_dim_v(self) -> int:
        return self.dv if self.dv is not None else self.d


# The head configurations of the CuBridge paper's models (docs/benchmark.md).
LLAMA2_7B = HeadConfig("llama2_7b", 32, 32, 128)
QWEN25_72B = HeadConfig("qwen25_72b", 64, 8, 128)
LLAMA31_405B = HeadConfig("llama31_405b", 128, 8, 128)
# Head dim 256 (Gemma 2 9B: soft-capped scores; Gemma 3 12B: the same heads, no cap).
GEMMA2_9B = HeadConfig("gemma2_9b", 16, 8, 256)
GEMMA3_12B = HeadConfig("gemma3_12b", 16, 8, 256)
# DeepSeek-V3's MLA at prefill, decompressed: 128 heads, each with its own K/V head,
# QK head dim 192 (128 + 64 rotary), V head dim 128.
DEEPSEEK_V3 = HeadConfig("deepseek_v3", 128, 128, 192, 128)
# Phi-3-mini: 32 heads of dim 96 (a head dim between the library's tiles).
PHI3_MINI = HeadConfig("phi3_mini", 32, 32, 96)
# DiT-XL/2 (diffusion transformer, 1152 wide): 16 heads of dim 72, a multiple of 8
# between the tiles that is not one of 16.
DIT_XL = HeadConfig("dit_xl", 16, 16, 72)
HEAD_CONFIGS = {c.name: c for c in (LLAMA2_7B, QWEN25_72B, LLAMA31_405B, GEMMA2_9B, GEMMA3_12B,
                                    DEEPSEEK_V3, PHI3_MINI, DIT_XL)}


@dataclass(frozen=True)
class Shape:
    """One attention problem size."""

    b: int
    hq: int
    hk: int
    sq: int
    sk: int
    d: int
    dv: int | None = None

    def __post_init__(self) -> None:
        for name in ("b", "hq", "hk", "sq", "sk", "d"):
            if getattr(self, name) <= 0:
                raise ValueError(f"shape {self}: {name} must be positive")
        if self.hq % self.hk:
            raise ValueError(f"shape {self}: hq={self.hq} is not a multiple of hk={self.hk}")

    @property
    def head_dim_v(self) -> int:
        return self.dv if self.dv is not None else self.d

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.hq // self.hk

    def kv_head(self, h: int) -> int:
        return h // self.group

    @classmethod
    def from_config(cls, cfg: HeadConfig, b: int, sq: int, sk: int | None = None) -> Shape:
        return cls(b, cfg.hq, cfg.hk, sq, sq if sk is None else sk, cfg.d, cfg.dv)

    def __str__(self) -> str:
        dv = f"/{self.dv}" if self.dv is not None else ""
        return f"B{self.b} H{self.hq}/{self.hk} S{self.sq}x{self.sk} D{self.d}{dv}"


def default_scale(d: int) -> float:
    return 1.0 / math.sqrt(d)


def attention_flops(allowed_pairs: int, hq: int, d: int, dv: int | None = None) -> float:
    """FLOPs of the forward pass counted on allowed (q, k) pairs only (docs/benchmark.md):
    2 for QK^T and 2 for PV per pair, head dim and query head."""
    return 2.0 * allowed_pairs * hq * (d + (dv if dv is not None else d))
