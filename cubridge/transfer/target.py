"""Rule-based transfer: the target CuIR program of a spec, as Python source.

The target is a subclass of the source kernel's CuIR class (e.g.
`class Target(FaSm80)`) that overrides hook methods only: score_mod,
mask_mod, activation, block_kind, kv_block_range, normalizer, aux_names (and
empty_row_score, for a floor mask). The
hook bodies are rendered from the same traced expressions as the CUDA header
(transfer.torch_render for values, transfer.interval for closed-form block
classification), so the program the executor verifies is the one lowered.

    source = render_target(plan, FaSm80)
    path = write_target(plan, FaSm80, run_dir / "target_cuir.py")
    Target = load_target(path)
"""

from __future__ import annotations

import keyword
from pathlib import Path

from cubridge.modules import load_module_from_path
from cubridge.transfer import expr, interval
from cubridge.transfer.hooks import HookPlan
from cubridge.transfer.score_masks import kernel_score
from cubridge.transfer.torch_render import TORCH_VARS, render_torch_body

TARGET_CLASS = "Target"
_RESERVED = set(TORCH_VARS.values()) | {"self", "torch", "math", "iv", "BlockKind", "q", "k",
                                        "q_start", "q_end", "k_start", "k_end", "allowed"}
_RESERVED |= {f"t{i}" for i in range(100)}  # temporaries of the renderers


def _aux_locals(node: expr.Node) -> tuple[list[str], dict[str, str]]:
    """`name = self.aux["name"]` lines for the aux an expression reads."""
    lines, names = [], {}
    for name in expr.aux_reads(node):
        local = name if name.isidentifier() and not keyword.iskeyword(name) \
            and name not in _RESERVED else f"aux_{len(names)}"
        names[name] = local
        lines.append(f"        {local} = self.aux[{name!r}]")
    return lines, names


def _method(signature: str, doc: str, body: list[str]) -> list[str]:
    return [f"    def {signature}:", f'        """{doc}"""', *body, ""]


def _value_hook(plan: HookPlan, node: expr.Node, result_var: str | None) -> list[str]:
    lines, names = _aux_locals(node)
    if any(rank > 0 for rank in expr.aux_reads(node).values()):
        # tail rows/columns of a tile lie past the sequence; their results are
        # masked out, but an aux read there must stay in bounds (CUDA clamps too)
        lines += ["        q_idx = q_idx.clamp(max=self.seqlen_q - 1)",
                  "        kv_idx = kv_idx.clamp(max=self.seqlen_k - 1)"]
    dtypes = {a.name: a.dtype for a in plan.aux}
    body = render_torch_body(node, names, dtypes)
    if node.op == "const" or (result_var and result_var not in expr.free_vars(node)):
        # constant or score-independent: still a full tile, as the executor expects
        like = "s" if result_var else "(q_idx >= kv_idx)"
        value = body[-1].strip().removeprefix("return ")
        body[-1] = f"        return torch.broadcast_to(torch.as_tensor({value}), {like}.shape)"
    return [*lines, *body]


def _interval_block_kind(plan: HookPlan) -> list[str]:
    assert plan.mask is not None
    code = interval.render(plan.mask.node, interval.python_lang(lambda n: f"self.aux[{n!r}]"))
    return [
        "        if q_end <= q_start or k_end <= k_start:",
        "            return BlockKind.EMPTY",
        "        b, h = iv.point(b), iv.point(h)",
        "        q, k = iv.span(q_start, q_end - 1), iv.span(k_start, k_end - 1)",
        f"        return BlockKind(int(iv.kind({code})))",
    ]


_TABLE_BLOCK_KIND = [
    "        # data-dependent mask: the tile's kind from the mask itself (the CUDA",
    "        # hooks read the same kinds from a block table built on the host)",
    "        if q_end <= q_start or k_end <= k_start:",
    "            return BlockKind.EMPTY",
    "        q_idx = torch.arange(q_start, q_end)[:, None]",
    "        kv_idx = torch.arange(k_start, k_end)[None, :]",
    "        allowed = self.mask_mod(torch.tensor(b), torch.tensor(h), q_idx, kv_idx)",
    "        allowed = allowed.expand(q_end - q_start, k_end - k_start)",
    "        if bool(allowed.all()):",
    "            return BlockKind.FULL",
    "        return BlockKind.PARTIAL if bool(allowed.any()) else BlockKind.EMPTY",
]

_KV_BLOCK_RANGE = [
    "        # leading [0, lo) and trailing [hi, n) key blocks that are EMPTY as a",
    "        # whole, by binary search (a tile inside an EMPTY tile is EMPTY); the",
    "        # CUDA hooks search the same way",
    "        n = -(-self.seqlen_k // self.block_n)",
    "        q_end = min(q_end, self.seqlen_q)",
    "",
    "        def empty(j0: int, j1: int) -> bool:",
    "            k_end = min(j1 * self.block_n, self.seqlen_k)",
    "            return self.block_kind(b, h, q_start, q_end, j0 * self.block_n, k_end) is \\",
    "                BlockKind.EMPTY",
    "",
    "        lo, top = 0, n",
    "        while lo < top:",
    "            mid = (lo + top + 1) // 2",
    "            lo, top = (mid, top) if empty(0, mid) else (lo, mid - 1)",
    "        bottom, hi = lo, n",
    "        while bottom < hi:",
    "            mid = (bottom + hi) // 2",
    "            bottom, hi = (bottom, mid) if empty(mid, n) else (mid + 1, hi)",
    "        return lo, hi",
]


def render_target(plan: HookPlan, base: type) -> str:
    """Python source of `class Target(base)` with the plan's hooks."""
    base_name = base.__name__
    lines = [
        f'"""Target CuIR for spec {plan.name!r} ({plan.source}).',
        "",
        f"Generated by cubridge.transfer.target: a subclass of {base_name} that overrides",
        f"hook methods only. Block classification: {plan.classification}.",
        '"""',
        "",
        "import math  # noqa: F401",
        "",
        "import torch  # noqa: F401",
        "",
        "from cubridge.ir import BlockKind  # noqa: F401",
        f"from {base.__module__} import {base_name}",
        "from cubridge.transfer import interval as iv  # noqa: F401",
        "",
        "",
        f"class {TARGET_CLASS}({base_name}):",
        f'    """{plan.name} on {base_name}: hooks generated from the spec\'s mods."""',
        "",
        f"    normalizer = {'elementwise' if plan.elementwise else 'softmax'!r}",
        f"    aux_names = {(*plan.aux_names, *plan.captured)!r}",
        "",
    ]
    if plan.mask_floor is not None:
        lines[-1:-1] = ["    # a floor mask: rows with no allowed key weigh every key alike",
                        f"    empty_row_score = {plan.mask_floor!r}"]
    if plan.score:
        lines += _method("score_mod(self, s, b, h, q_idx, kv_idx)",
                         "Traced from the spec's score_mod.",
                         _value_hook(plan, kernel_score(plan.score.node, plan.normalizer),
                                     "score"))
    if plan.mask:
        lines += _method("mask_mod(self, b, h, q_idx, kv_idx)",
                         "Traced from the spec's mask_mod.",
                         _value_hook(plan, plan.mask.node, None))
    if plan.elementwise:
        fn = {"sigmoid": "torch.sigmoid(s)", "relu": "torch.relu(s)"}[plan.normalizer]
        lines += _method("activation(self, s)", f"The {plan.normalizer} normaliser.",
                         [f"        return {fn}"])
    if plan.classification == "interval":
        lines += _method("block_kind(self, b, h, q_start, q_end, k_start, k_end)",
                         "Closed form: the mask on intervals of the tile's positions.",
                         _interval_block_kind(plan))
    elif plan.classification == "table":
        lines += _method("block_kind(self, b, h, q_start, q_end, k_start, k_end)",
                         "The mask evaluated on the tile.", _TABLE_BLOCK_KIND)
    if plan.classification != "none":
        lines += _method("kv_block_range(self, b, h, q_start, q_end)",
                         "Key blocks [lo, hi) that are not EMPTY at either end.",
                         _KV_BLOCK_RANGE)
    return "\n".join(lines).rstrip() + "\n"


def write_target(plan: HookPlan, base: type, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_target(plan, base))
    return path


def load_target(path: str | Path) -> type:
    """Import a generated target module and return its Target class."""
    return getattr(load_module_from_path(Path(path), prefix="cubridge_target"), TARGET_CLASS)
