"""GPU architecture names: parsing `sm_XY[a]`, nvcc -gencode flags, and the
target for a device's compute capability."""

from __future__ import annotations

import re

from cubridge.build.errors import UnsupportedArchError

_ARCH = re.compile(r"^sm_(\d+)(\d)([af]?)$")  # sm_90a: (9, 0); sm_100a: (10, 0)


def parse_arch(arch: str) -> tuple[int, int, str]:
    """'sm_90a' -> (9, 0, 'a'). Raises UnsupportedArchError on anything else."""
    m = _ARCH.match(arch)
    if not m:
        raise UnsupportedArchError(
            f"architecture {arch!r} is not of the form sm_XY or sm_XYa (e.g. sm_80, sm_90a)"
        )
    return int(m.group(1)), int(m.group(2)), m.group(3)


def gencode_flag(arch: str) -> str:
    """nvcc flag that emits SASS for exactly `arch` (no PTX, no other targets).
    The -gencode form, unlike -arch=sm_90a, never runs a plain sm_90 pass."""
    major, minor, suffix = parse_arch(arch)
    return f"-gencode=arch=compute_{major}{minor}{suffix},code=sm_{major}{minor}{suffix}"


def arch_for_capability(major: int, minor: int) -> str:
    """The target we compile for on a device of this compute capability: the
    arch-specific 'a' variant where one exists (sm_90a, sm_100a), so that kernels
    may use wgmma/tcgen05 there."""
    if (major, minor) in ((9, 0), (10, 0), (10, 3)):
        return f"sm_{major}{minor}a"
    return f"sm_{major}{minor}"


def check_supported(arch: str, min_arch: str, what: str) -> None:
    """Raise UnsupportedArchError when `arch` is older than `min_arch`."""
    have = parse_arch(arch)[:2]
    need = parse_arch(min_arch)[:2]
    if have < need:
        raise UnsupportedArchError(
            f"{what} needs {min_arch} or newer; this device is {arch}"
        )
