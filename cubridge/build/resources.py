"""The ptxas resource report (`-Xptxas -v`): registers, shared memory, stack
and spills per function, parsed into records kept with each cubin."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace

# Spill traffic (stores + loads, bytes) a variant built from a library kernel
# may have. A variant's hooks or edits add registers to a kernel that sits near
# 255, and a few loop-invariant values reloaded once per key block cost a few
# percent (the Ampere entry's NOTES.md). More than this means the variant needs
# restructuring.
SPILL_BUDGET_BYTES = 160
# The library kernels' own bound: the Ampere entry at D = 128 keeps a few scalars in
# local memory, measured faster than its spill-free predecessor (its NOTES.md).
LIBRARY_SPILL_BYTES = 48


@dataclass(frozen=True)
class KernelResources:
    """What ptxas reported for one function. `smem_bytes` is static shared
    memory only; dynamic shared memory is chosen at launch."""

    name: str
    arch: str
    registers: int
    smem_bytes: int
    stack_frame_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int
    barriers: int
    # Spill traffic of the non-inlined device functions compiled with it for the same
    # arch (ptxas reports them apart; any may be called from this entry, so they count).
    callee_spill_bytes: int = 0

    @property
    def spills(self) -> bool:
        return self.spill_bytes > 0

    @property
    def spill_bytes(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes + self.callee_spill_bytes

    def spill_text(self, *more: str) -> str:
        """'N B (S B stored, L B loaded[, C B in non-inlined functions][, more...])'."""
        parts = [f"{self.spill_store_bytes} B stored", f"{self.spill_load_bytes} B loaded"]
        if self.callee_spill_bytes:
            parts.append(f"{self.callee_spill_bytes} B in non-inlined functions")
        return f"{self.spill_bytes} B ({', '.join([*parts, *more])})"

    @property
    def within_spill_budget(self) -> bool:
        return self.spill_bytes <= SPILL_BUDGET_BYTES

    def to_json(self) -> dict[str, object]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, object]) -> KernelResources:
        return cls(**data)  # type: ignore[arg-type]


_COMPILING = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
_PROPERTIES = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(
    r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads"
)
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_BARRIERS = re.compile(r"used (\d+) barriers")


def parse_ptxas_report(text: str) -> dict[str, KernelResources]:
    """Entry functions of a `ptxas -v` log, by (mangled or extern "C") name. The
    spills of non-inlined device functions (`__noinline__`) compiled for the same
    arch count towards each entry's spill_bytes (callee_spill_bytes): ptxas lists
    them apart, and an entry's own line would read 'no spills' beside a callee
    that spills hundreds of bytes.

    Raises ValueError when an entry's report is incomplete, so that a changed
    log format fails loudly instead of reading as 'no spills'."""
    found: dict[str, KernelResources] = {}
    callee_spills: dict[str, int] = {}  # arch -> spill traffic of non-entry functions
    entry: str | None = None
    callee = False  # the next frame line is a non-entry function's
    arch = ""
    frame: tuple[int, int, int] | None = None
    for line in text.splitlines():
        if m := _COMPILING.search(line):
            entry, arch, frame, callee = m.group(1), m.group(2), None, False
        elif (m := _PROPERTIES.search(line)) and m.group(1) != entry:
            entry, callee = None, True  # a non-entry function's properties follow
        elif (m := _FRAME.search(line)) and callee:
            callee_spills[arch] = callee_spills.get(arch, 0) + int(m.group(2)) + int(m.group(3))
            callee = False
        elif (m := _FRAME.search(line)) and entry is not None:
            frame = (int(m.group(1)), int(m.group(2)), int(m.group(3)))
        elif (m := _USED.search(line)) and entry is not None:
            if frame is None:
                raise ValueError(f"ptxas report for {entry!r}: no stack/spill line before {line!r}")
            smem = _SMEM.search(line)
            barriers = _BARRIERS.search(line)
            found[entry] = KernelResources(
                name=entry,
                arch=arch,
                registers=int(m.group(1)),
                smem_bytes=int(smem.group(1)) if smem else 0,
                stack_frame_bytes=frame[0],
                spill_store_bytes=frame[1],
                spill_load_bytes=frame[2],
                barriers=int(barriers.group(1)) if barriers else 0,
            )
            entry = None
    return {name: replace(r, callee_spill_bytes=callee_spills.get(r.arch, 0))
            for name, r in found.items()}
