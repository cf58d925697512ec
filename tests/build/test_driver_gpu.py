"""The launch path reads PyTorch's current stream on every call: through the
private accessor where this PyTorch has it, else the public API. Both must name
the stream PyTorch itself would use, on the default stream and inside a
`torch.cuda.stream` block."""

from __future__ import annotations

import pytest
import torch

from cubridge.build import driver

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("accessor", ["private", "public"])
def test_current_raw_stream_is_pytorchs_current_stream(accessor, monkeypatch):
    if accessor == "public":
        monkeypatch.delattr(torch._C, "_cuda_getCurrentRawStream", raising=False)
    device = torch.device("cuda", torch.cuda.current_device())
    assert driver.current_raw_stream(device) == torch.cuda.current_stream(device).cuda_stream
    assert driver.current_raw_stream(torch.device("cuda")) == \
        torch.cuda.current_stream(device).cuda_stream
    side = torch.cuda.Stream(device)
    with torch.cuda.stream(side):
        assert driver.current_raw_stream(device) == side.cuda_stream != 0
