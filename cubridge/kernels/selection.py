"""Choosing the library entry for a device and a spec, and saying why.

    selection = choose_kernel("sm_90a", head_dim=128, dtype=torch.bfloat16)
    selection.kernel      # the Hopper entry on sm_90a, the Ampere one on sm_80/86/89
    str(selection)        # "<entry> for sm_90a, D=128, bfloat16: the highest-priority ..."

The rule: `kernel` (the `--kernel` override, by name or object) when given;
else the highest-priority entry supporting the arch, head dims, dtype and
normaliser (the newest minimum arch first among equals; with no arch, the
most portable entry first). When no entry supports the request as it is (head
dims of MLA, say), the highest-priority entry that runs on the arch: the
router then sends the spec to the LLM path to adapt it. `cubridge run`,
`cubridge.compile` and the LLM path record the selection's reason (plan.json,
report.md, the `[select]` line).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from cubridge.build.driver import device_arch
from cubridge.kernels.library import LibraryKernel, arch_number, get_kernel, list_kernels


@dataclass(frozen=True)
class Selection:
    """The entry chosen for a request, and why, in one line."""

    kernel: LibraryKernel
    request: str  # "sm_90a (this GPU: NVIDIA H100 80GB HBM3), D=128, bfloat16, softmax"
    reason: str
    override: bool = False  # --kernel named it
    passed_over: tuple[tuple[str, str], ...] = ()  # (entry, why not), ranked above it

    def __str__(self) -> str:
        return f"{self.kernel.name} for {self.request}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel.name, "request": self.request, "reason": self.reason,
                "override": self.override,
                "passed_over": [{"kernel": n, "why": w} for n, w in self.passed_over]}


def _request(arch: str | None, arch_source: str, head_dim: int | None, head_dim_v: int | None,
             dtype: torch.dtype | None, normalizer: str | None) -> str:
    parts = [f"{arch} ({arch_source})" if arch and arch_source else arch or "no arch"]
    if head_dim is not None:
        parts.append(f"D={head_dim}" + (f"/{head_dim_v}" if head_dim_v not in (None, head_dim)
                                        else ""))
    if dtype is not None:
        parts.append(str(dtype).removeprefix("torch."))
    if normalizer is not None:
        parts.append(normalizer)
    return ", ".join(parts)


def _ranked(arch: str | None) -> list[LibraryKernel]:
    entries = list_kernels()
    if not entries:
        raise ValueError("the kernel library is empty")
    if arch is None:  # no device known: the most portable entry first
        return sorted(entries, key=lambda k: (arch_number(k.metadata.min_arch),
                                              -k.metadata.priority, k.name))
    return sorted(entries, key=lambda k: (-k.metadata.priority,
                                          -arch_number(k.metadata.min_arch), k.name))


def _automatic(arch: str | None, request: str, **need: Any) -> Selection:
    order = _ranked(arch)
    passed: list[tuple[str, str]] = []
    for candidate in order:
        why = candidate.unsupported(arch=arch, **need)
        if why:
            passed.append((candidate.name, why))
            continue
        rank = ("the most portable entry (no arch given)" if arch is None else
                f"the highest-priority entry (priority {candidate.metadata.priority}) "
                "that supports it")
        clauses = [f"{n} passed over ({w})" for n, w in passed] + [rank]
        also = [k for k in order[order.index(candidate) + 1:]
                if not k.unsupported(arch=arch, **need)]
        if also:
            clauses.append("; ".join(f"{k.name} fits too (priority {k.metadata.priority})"
                                     for k in also))
        return Selection(candidate, request, "; ".join(clauses), passed_over=tuple(passed))
    split = need.get("head_dim_v") not in (None, need.get("head_dim"))
    for candidate in order:
        if split and not candidate.unsupported(arch=arch) and candidate.takes_head_dim_v:
            # A V head dim of its own (MLA's 192/128) is a change only an entry whose
            # source takes it as a macro can be edited into.
            gaps = "; ".join(f"{n}: {w}" + ("" if get_kernel(n).takes_head_dim_v else
                                            f"; {n} has no separate V head dim (no head_dim_v "
                                            "macro in its source), so no edit builds this")
                             for n, w in passed)
            return Selection(candidate, request,
                             f"no entry supports the request as it is ({gaps}); "
                             f"{candidate.name} takes a V head dim apart from QK's "
                             f"({candidate.metadata.defines['head_dim_v']}), the nearest the "
                             "LLM path can edit", passed_over=tuple(passed))
    for candidate in order:
        if not candidate.unsupported(arch=arch):
            gaps = "; ".join(f"{n}: {w}" for n, w in passed)
            return Selection(candidate, request,
                             f"no entry supports the request as it is ({gaps}); {candidate.name} "
                             f"is the highest-priority entry for {arch}, to be adapted",
                             passed_over=tuple(passed))
    reasons = "; ".join(f"{k.name}: {k.unsupported(arch=arch)}" for k in order)
    raise ValueError(f"no library kernel runs on {arch} ({reasons})")


def choose_kernel(arch: str | None = None, head_dim: int | None = None,
                  dtype: torch.dtype | None = None, normalizer: str | None = None, *,
                  head_dim_v: int | None = None, kernel: str | LibraryKernel | None = None,
                  arch_source: str = "") -> Selection:
    """The entry for this request and why (module docstring). `arch_source`
    says where the arch came from ("this GPU: NVIDIA H100", "--arch")."""
    need = dict(head_dim=head_dim, head_dim_v=head_dim_v, dtype=dtype, normalizer=normalizer)
    request = _request(arch, arch_source, head_dim, head_dim_v, dtype, normalizer)
    if not kernel:
        return _automatic(arch, request, **need)
    chosen = kernel if isinstance(kernel, LibraryKernel) else get_kernel(kernel)
    try:
        auto = _automatic(arch, request, **need).kernel
    except ValueError:
        auto = None
    reason = f"--kernel {chosen.name} overrides the selection"
    if auto is chosen:
        reason += " (the library would pick it too)"
    elif auto is not None:
        reason += f" (the library would pick {auto.name})"
    why = chosen.unsupported(arch=arch, **need)
    if why:
        reason += f"; {chosen.name} does not support the request as it is: {why}"
    return Selection(chosen, request, reason, override=True)


def choose_for_spec(spec: Any, arch: str | None = None,
                    kernel: str | LibraryKernel | None = None, arch_source: str = ""
                    ) -> Selection:
    """`choose_kernel` for a spec: its first head config, first dtype and normaliser.
    A `--kernel` entry that cannot take the spec's separate V head dim is an error
    (no edit of its source can build the variant)."""
    cfg = spec.configs[0]
    chosen = choose_kernel(arch, cfg.d, spec.dtypes[0] if spec.dtypes else None,
                           spec.normalizer, head_dim_v=cfg.head_dim_v, kernel=kernel,
                           arch_source=arch_source)
    split = sorted({(c.d, c.head_dim_v) for c in spec.configs
                    if c.head_dim_v not in (None, c.d)})
    if kernel and split and not chosen.kernel.takes_head_dim_v:
        name = chosen.kernel.name
        others = [k.name for k in list_kernels() if k.takes_head_dim_v
                  and not k.unsupported(arch=arch)]
        raise ValueError(
            f"{name} cannot serve {spec.name}: its QK and V head dims differ "
            f"({', '.join(f'{d}/{dv}' for d, dv in split)}) and {name}'s source has no "
            "separate V head dim (no head_dim_v macro), so no edit of it can build the "
            f"variant; use {' or '.join(others) or 'an entry that has one'} (leave --kernel "
            "out to select it)")
    return chosen


def select_kernel(arch: str | None = None, head_dim: int | None = None,
                  dtype: torch.dtype | None = None, normalizer: str | None = None, *,
                  head_dim_v: int | None = None, kernel: str | LibraryKernel | None = None
                  ) -> LibraryKernel:
    """The entry `choose_kernel` picks (without the reason)."""
    return choose_kernel(arch, head_dim, dtype, normalizer, head_dim_v=head_dim_v,
                         kernel=kernel).kernel


def select_for_spec(spec: Any, arch: str | None = None,
                    kernel: str | LibraryKernel | None = None) -> LibraryKernel:
    """The entry `choose_for_spec` picks (without the reason)."""
    return choose_for_spec(spec, arch, kernel).kernel


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float | None = None,
              causal: bool = False, hooks_header: str | None = None,
              aux: Any = (), out: torch.Tensor | None = None,
              lse: torch.Tensor | None = None, source: str | None = None,
              kernel: str | LibraryKernel | None = None
              ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Forward attention with the library entry `select_kernel` picks for q (its
    GPU's arch, head dim and dtype), or `kernel`; see LibraryKernel.attention.
    q [B,Hq,Sq,D], k/v [B,Hk,Sk,D] (cubridge.attention conventions)."""
    arch = device_arch(q.device) if q.is_cuda else None
    d = q.shape[-1] if q.dim() else None
    chosen = select_kernel(arch, d, q.dtype, kernel=kernel)
    return chosen.attention(q, k, v, scale, causal, hooks_header, aux, out, lse, source)
