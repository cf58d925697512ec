"""Tensors a mod captures (closures, globals), lifted to aux tensors.

FlexAttention users write `doc_ids[q_idx] == doc_ids[kv_idx]` with `doc_ids`
captured by closure. When a traced mod indexes such a tensor, the tracer asks
`Captures.aux_name` for the tensor's aux name: the name of the variable that
holds it (found by walking the mods' closures, nested closures such as
FlexAttention's `or_masks`, functools.partial arguments and referenced
globals), made unique against the spec's own aux names. The lifted tensors
travel with the hook plan (`HookPlan.captured`), which supplies them when a
call does not pass them.
"""

from __future__ import annotations

import keyword
from collections.abc import Callable, Iterable, Mapping

import torch

from cubridge.spec.captured import captured_tensors


def _identifier(name: str) -> str:
    name = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "captured"
    if name[0].isdigit() or keyword.iskeyword(name):
        name = "captured_" + name
    return name


class Captures:
    """The tensors the mods of one spec capture, with their aux names."""

    def __init__(self, mods: Iterable[Callable[..., object] | None],
                 taken: Iterable[str] = ()) -> None:
        self._names: dict[int, str] = {}
        for fn in mods:
            for key, (name, _tensor) in captured_tensors(fn).items():
                self._names.setdefault(key, name)
        self._taken = set(taken)
        self.lifted: dict[str, torch.Tensor] = {}  # aux name -> tensor, as traced
        self._by_id: dict[int, str] = {}

    def aux_name(self, tensor: torch.Tensor) -> str:
        """The aux name of a captured tensor (the same tensor, the same name)."""
        if id(tensor) in self._by_id:
            return self._by_id[id(tensor)]
        base = _identifier(self._names.get(id(tensor), "captured"))
        name, n = base, 1
        while name in self._taken or name in self.lifted:
            n += 1
            name = f"{base}_{n}"
        self._by_id[id(tensor)] = name
        self.lifted[name] = tensor
        return name


def on_device(captured: Mapping[str, torch.Tensor], device: torch.device | str
              ) -> dict[str, torch.Tensor]:
    """The captured tensors on `device` (the same tensors where they already are)."""
    return {n: t if t.device == torch.device(device) else t.to(device)
            for n, t in captured.items()}
