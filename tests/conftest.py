"""Suite-wide: tests marked `gpu` need a CUDA GPU. The README's test command
deselects them (-m "not gpu"); run without it on a machine with no GPU, they
are skipped with that reason instead of failing on the missing device."""

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run `python -m pytest -m gpu` on one)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
