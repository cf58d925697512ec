"""fa_sm90 as a library entry: its tile-config type (consumer warpgroups, not
warps), its launch ABI (tensor maps ahead of FwdParams, a persistent grid) and
its architecture (wgmma and setmaxnreg exist on sm_90a only)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from cubridge.build.arch import parse_arch
from cubridge.build.attention_op import KernelInfo
from cubridge.build.compile import CompiledKernel
from cubridge.build.errors import CompileError, UnsupportedArchError
from cubridge.build.resources import SPILL_BUDGET_BYTES
from cubridge.kernels.abi import Launch
from cubridge.kernels.fa_sm90.launch import ROWS_PER_CONSUMER, sm90_launch
from cubridge.kernels.library import LibraryKernel, header_constant

# The register-hungry fast paths a generated variant past the spill budget may drop
# (fa_sm90.cu's switches), each with the header constant that, when positive, makes
# the variant take it (None: every variant does).
SPILL_FALLBACKS = (("CUBRIDGE_KEEP_MAX_BY_SUMS", None),
                   ("CUBRIDGE_ROW_INTERVAL_BITS", "kRowIntervals"),
                   ("CUBRIDGE_KEY_RUN_BITS", "kRunIntervals"),
                   ("CUBRIDGE_KEY_SET_BITS", "kKeySetCases"),
                   ("CUBRIDGE_KEY_GROUP_BITS", "kKeyGroup"))


def spill_fallbacks(hooks_header: str) -> list[dict[str, int]]:
    """The defines to build a spilling variant with, in order: each fast path its
    header takes turned off alone, then all of them."""
    paths = [define for define, constant in SPILL_FALLBACKS
             if constant is None or header_constant(hooks_header, constant) > 0]
    return [{p: 0} for p in paths] + ([{p: 0 for p in paths}] if len(paths) > 1 else [])


@dataclass(frozen=True)
class Sm90TileConfig:
    """Tiling of fa_sm90: block_m query rows per CTA (64 per consumer warpgroup),
    block_n keys per K/V block, stages slots in the K/V ring, q_buffers Q tiles (2:
    the next tile's Q loads while this one runs; 1: O is staged in the tile's own Q
    buffer, where two Q tiles, the ring and O's staging do not fit, as at D = 256)."""

    block_m: int
    block_n: int
    stages: int
    q_buffers: int = 2

    def __post_init__(self) -> None:
        if self.block_m % ROWS_PER_CONSUMER or self.block_m // ROWS_PER_CONSUMER not in (2, 3):
            raise ValueError(f"fa_sm90: block_m {self.block_m} must be 2 or 3 consumer "
                             f"warpgroups of {ROWS_PER_CONSUMER} rows")
        if self.q_buffers not in (1, 2):
            raise ValueError(f"fa_sm90: q_buffers {self.q_buffers} must be 1 or 2")

    @property
    def consumer_warpgroups(self) -> int:
        return self.block_m // ROWS_PER_CONSUMER

    def cuir_kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @property
    def table_rows(self) -> int:
        """Query rows classified at once: one consumer warpgroup's."""
        return ROWS_PER_CONSUMER


class FaSm90Kernel(LibraryKernel):
    """The Hopper entry."""

    config_type = Sm90TileConfig

    def unsupported(self, *, arch: str | None = None, **request: Any) -> str:
        if arch is not None and arch not in self.metadata.archs:
            return f"wgmma/TMA kernel for {', '.join(self.metadata.archs)} only (have {arch})"
        return super().unsupported(arch=arch, **request)

    def default_config(self, head_dim: int, *, masked: bool = True,
                       head_dim_v: int | None = None) -> Sm90TileConfig:
        """Unmasked builds take metadata's "unmasked_configs" where it has one: at
        D=64 three consumers measured +13% on full attention and -14% on causal
        (NOTES.md), so masked builds keep the metadata's config."""
        if head_dim_v not in (None, head_dim):
            return self.config(head_dim, head_dim_v)
        raw = json.loads((self.directory / "metadata.json").read_text())
        unmasked = raw.get("unmasked_configs", {}).get(str(head_dim))
        if masked or unmasked is None:
            return self.config(head_dim)
        return Sm90TileConfig(**unmasked)

    def compile(self, head_dim: int, dtype: torch.dtype, arch: str, *, causal: bool = False,
                hooks_header: str | None = None, config: Any = None, **kwargs: Any
                ) -> CompiledKernel:
        if parse_arch(arch) != (9, 0, "a"):
            raise UnsupportedArchError(f"kernel {self.name} (wgmma, TMA, setmaxnreg) runs on "
                                       f"sm_90a (H100/H200) only; the target is {arch}")
        head_dim_v = kwargs.get("head_dim_v")
        if config is None and hooks_header is None:
            config = self.default_config(head_dim, masked=causal, head_dim_v=head_dim_v)
        compiled = super().compile(head_dim, dtype, arch, causal=causal,
                                   hooks_header=hooks_header, config=config, **kwargs)
        if hooks_header is None:
            built = compiled  # the library's own hooks, as built
        else:  # (a patched source too: an A/B's)
            built = self._within_spill_budget(compiled, head_dim, dtype, arch, hooks_header,
                                              config, head_dim_v, kwargs.get("source"))
        self._refuse_spilling_three_consumers(
            built, config or self._base_config(head_dim, head_dim_v))
        return built

    def _refuse_spilling_three_consumers(self, compiled: CompiledKernel,
                                         config: Sm90TileConfig) -> None:
        """Three consumer warpgroups leave the producer warp 32 registers, and there
        nvcc 13.0's ptxas uses the stack pointer (R1) as a general register: a build
        that spills then faults at its first spill store (an out-of-range local
        address; NOTES.md, "Three consumers must not spill"). Refused here, before it
        can reach a GPU."""
        res = compiled.resources_of(self.entry)
        if config.consumer_warpgroups == 3 and res.spills:
            raise CompileError(
                f"{self.name}: this build has three consumer warpgroups (block_m "
                f"{config.block_m}) and spills ({res.spill_text(f'{res.registers} registers')}); "
                "with three consumers the producer warp keeps 32 registers, where nvcc "
                "13.0's ptxas reuses the stack pointer and the first spill store faults. "
                "Build it with block_m 128 (two consumers), or make it fit without spills",
                [], compiled.log)

    def _within_spill_budget(self, compiled: CompiledKernel, head_dim: int, dtype: torch.dtype,
                             arch: str, hooks_header: str, config: Any,
                             head_dim_v: int | None, source: str | None) -> CompiledKernel:
        """A generated variant that spills past the budget is built again without
        the register-hungry fast paths its header takes, each alone and then all of
        them: its steady blocks always reducing the row max (CUBRIDGE_KEEP_MAX_BY_SUMS=0:
        one set of P fragments fewer live), its mask bits per pair instead of from row
        intervals (CUBRIDGE_ROW_INTERVAL_BITS=0) or from key runs
        (CUBRIDGE_KEY_RUN_BITS=0), in that order until a build fits the budget; the one
        that spilled least up to there is used (heavy per-score hooks; NOTES.md). A
        patched `source` under a generated header (an A/B's kernel edit) is held to
        the same budget through its own switches."""
        best, best_spills = compiled, compiled.resources_of(self.entry).spill_bytes
        base = self.compile_defines(head_dim, dtype, config, head_dim_v=head_dim_v)
        for off in spill_fallbacks(hooks_header):
            if best_spills <= SPILL_BUDGET_BYTES:
                break
            build = self.compile_source(source, arch, hooks_header, {**base, **off})
            spills = build.resources_of(self.entry).spill_bytes
            if spills < best_spills:
                best, best_spills = build, spills
        return best

    def launch(self, info: KernelInfo, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               out: torch.Tensor, lse: torch.Tensor, scale: float,
               aux: Sequence[torch.Tensor]) -> Launch:
        return sm90_launch(info, self.entry, q, k, v, out, lse, scale, aux)
