"""On the GPU: each library kernel that runs on this device, with each generated
hook header, computes its spec (through the verifier), block tables (at the
kernel's own table tile) included. Run with `pytest -m gpu`."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest
import torch

from cubridge.attention import Shape
from cubridge.lower.hook_header import generate_header
from cubridge.spec import load
from cubridge.transfer.hooks import plan_hooks

pytestmark = pytest.mark.gpu
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "specs"

def _rules_path(spec) -> bool:
    """Inside the hook family: the router lowers it by hooks (cosine, MLA, the
    structural examples take the LLM path; tests/pipeline/test_structural_examples.py)."""
    from cubridge.kernels import get_kernel
    from cubridge.pipeline.route import choose_path

    return choose_path(spec, get_kernel("fa_sm80")).path == "rules"


SPECS = {s.name: s for s in map(load, sorted(glob.glob(str(EXAMPLES / "*.py"))))
         if _rules_path(s)}
# tails, Sq != Sk both ways, GQA 8, and long enough for 1024-token windows
SHAPES = [Shape(2, 16, 2, 200, 127, 128), Shape(1, 4, 4, 65, 300, 128),
          Shape(1, 8, 1, 2100, 2300, 128), Shape(2, 4, 4, 1100, 1100, 64)]


def _impl(spec, kernel_name):
    from cubridge.kernels import get_kernel

    kernel = get_kernel(kernel_name)
    header = generate_header(plan_hooks(spec, table_block=kernel.table_block(128)))

    def attention(q, k, v, scale=None, **aux):
        shape = Shape(q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3])
        return kernel.attention(q, k, v, scale=scale, hooks_header=header.text,
                                aux=header.pack_aux(aux, shape))

    return attention


def _runs_here(kernel_name: str) -> bool:
    from cubridge.build.driver import device_arch
    from cubridge.kernels import get_kernel

    arch = device_arch(torch.device("cuda"))
    return not get_kernel(kernel_name).unsupported(arch=arch)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("kernel_name", ["fa_sm80", "fa_sm90"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_generated_hooks_compute_the_spec_on_the_gpu(name, kernel_name):
    from cubridge.verify import verify

    if not _runs_here(kernel_name):
        pytest.skip(f"{kernel_name} does not run on this GPU")
    spec = SPECS[name]
    report = verify(spec, _impl(spec, kernel_name), device="cuda", dtypes=[torch.bfloat16],
                    shapes=SHAPES, seed=0, require_lse=spec.returns_lse)
    assert report.passed, report.table()
