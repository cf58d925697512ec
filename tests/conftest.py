"""Suite-wide markers, applied here and nowhere else:

- `gpu`: needs a CUDA GPU. The README's test command deselects these
  (-m "not gpu"); run on a machine without one they are skipped with that
  reason instead of failing on the missing device.
- `nvcc`: needs nvcc (compile-only checks; CI runs them). Skipped where the
  build's own finder (cubridge.build.nvcc.find_nvcc: PATH, CUDA_HOME /
  CUDA_PATH, /usr/local/cuda) finds none.
- `slow`: more than about a second on two CPU cores. The inner loop leaves
  them out: python -m pytest -m "not gpu and not slow"; CI runs them.
"""

import pytest
import torch

from cubridge.build.nvcc import nvcc_available


def pytest_collection_modifyitems(config, items):
    skips = []
    if not torch.cuda.is_available():
        skips.append(("gpu", pytest.mark.skip(
            reason="needs a CUDA GPU (run `python -m pytest -m gpu` on one)")))
    if not nvcc_available():
        skips.append(("nvcc", pytest.mark.skip(
            reason="needs nvcc (install the CUDA toolkit or set CUDA_HOME)")))
    for item in items:
        for marker, skip in skips:
            if marker in item.keywords:
                item.add_marker(skip)
