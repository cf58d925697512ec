"""Key groups: masks that read the key only through its aligned group, `k // G`.

BigBird's mask (`|qb - kb| <= 1 | qb == 0 | kb == 0 | rand_blocks[h, qb, kb]` with
`kb = k // 64`) is the same for every key of a 64-key group. Evaluated per pair, a
kernel computes it 64 times a row a block where two evaluations would do, and the table
read per score spilled (352 B in the Hopper kernel). Where every use of the key in the
mask is a floor quotient `k // G'` by a power of two, the mask is constant on aligned groups of
G = min(G') keys: a kernel may evaluate it once a group, at the group's first key, and
set the group's bits at once (kKeyGroup, docs/hooks.md).
"""

from __future__ import annotations

from cubridge.transfer.expr import DType, Node

KEY = "k"
# Smaller groups than a thread's column stride gain nothing (8 keys: 2 of a thread's).
MIN_GROUP = 8
MAX_GROUP = 1 << 20


def key_group(mask: Node | None) -> int:
    """G where the mask reads the key only as `k // G'` with every G' a power of two
    multiple of G (>= MIN_GROUP); 0 where it reads it otherwise or not at all."""
    if mask is None or mask.dtype != DType.BOOL:
        return 0
    divisors: list[int] = []

    def visit(n: Node) -> bool:  # False: a use of the key outside a group quotient
        if n.op == "var" and n.arg == KEY:
            return False
        if n.op == "floordiv" and n.args[0].op == "var" and n.args[0].arg == KEY:
            d = n.args[1]
            if (d.op == "const" and isinstance(d.arg, int) and not isinstance(d.arg, bool)
                    and MIN_GROUP <= d.arg <= MAX_GROUP and d.arg & (d.arg - 1) == 0):
                divisors.append(d.arg)
                return True
            return False
        return all(visit(a) for a in n.args)

    if not visit(mask) or not divisors:
        return 0
    return min(divisors)


KEY_GROUP_COMMENT = """\
// The mask reads the key only through its aligned group of kKeyGroup keys (k // G for
// powers of two G >= kKeyGroup; 0: not so): it is the same for every key of a group, and a
// kernel may evaluate it once a group at the group's first key (docs/hooks.md).
#define CUBRIDGE_HOOKS_KEY_GROUP 1  // (kKeyGroup)"""


def render_key_group(mask: Node | None) -> str:
    return f"{KEY_GROUP_COMMENT}\nconstexpr int kKeyGroup = {key_group(mask)};\n"
