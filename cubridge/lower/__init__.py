"""Lower: target CuIR + source CUDA -> target CUDA.

For hook-confined variants (this package), lowering generates one header,
`cubridge_hooks.cuh` (docs/hooks.md), from the hook plan the transfer used:
the traced mods rendered as C++ (cuda_render) with block classification in
closed form or through block tables, plus the aux manifest the launcher packs.

    header = generate_header(plan_hooks(spec))
    header.text, header.manifest(), header.pack_aux(aux, shape)
"""

from cubridge.lower.hook_header import AuxSlot, HookHeader, generate_header

__all__ = ["AuxSlot", "HookHeader", "generate_header"]
