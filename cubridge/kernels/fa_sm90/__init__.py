"""fa_sm90: our FlashAttention-3-class Hopper forward kernel (fa_sm90.cu), a
library entry like any other: `cubridge.kernels.get_kernel("fa_sm90")` (kernel.py
holds its tile-config type and launch ABI, launch.py the TMA tensor maps and the
tile schedule, cuir.py its CuIR program, NOTES.md why it is shaped so)."""
