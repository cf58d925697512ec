"""On the GPU (pytest -m gpu on the device machine): the recorded lowerings of
fa_sm80.cu to the structural variants (cosine attention, MLA 192/128, the
learnable sink, softmax_1, the gated output, differential attention) and of
fa_sm90.cu to cosine attention and MLA (sm90 only; MLA's keeps the source as
it is, built at 192/128), compiled for the device, launched
and verified against their specs by the differential verifier, in the watched
child process the lowering stage uses."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from stage_fixtures import FAST, SPECS, fixture_reply

from cubridge.kernels import get_kernel
from cubridge.llm import apply_edits, code_block, parse_edits
from cubridge.llm_path.gpu_check import IsolatedGpuCheck
from cubridge.llm_path.lower import builds_for, describe_target
from cubridge.spec import load

pytestmark = pytest.mark.gpu

# Every recorded lowering of fa_sm80.cu; each is built with the configuration of
# its recorded target program (tile sizes, causality), as the lowering stage does.
VARIANTS = ["cosine", "mla", "learnable_sink", "softmax_one", "gated_output", "differential"]


def target_config(variant: str, lib, suffix: str, tmp_path) -> dict:
    target = tmp_path / "target_cuir.py"
    target.write_text(code_block(fixture_reply(f"transfer_{variant}{suffix}.md"), "python"))
    return describe_target(target, lib, FAST)["config"]


@pytest.mark.parametrize(("variant", "library"), [
    *[(v, "fa_sm80") for v in VARIANTS], ("cosine", "fa_sm90"), ("mla", "fa_sm90")])
def test_recorded_lowering_passes_the_gpu_verifier(variant, library, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible")
    if library == "fa_sm90" and torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fa_sm90 runs on sm90 (Hopper) only")
    from cubridge.build.driver import device_arch

    lib = get_kernel(library)
    suffix = "" if library == "fa_sm80" else f"_{library}"
    source = apply_edits(lib.source.read_text(),
                         parse_edits(fixture_reply(f"lower_{variant}{suffix}.md")))
    spec = load(SPECS / f"{variant}.py")
    arch = device_arch(torch.device("cuda"))
    config = target_config(variant, lib, suffix, tmp_path)
    for dtype in spec.dtypes:
        spec_dtype = dataclasses.replace(spec, dtypes=[dtype])
        compiled = [(b, lib.compile_build(b, dtype, arch, source=source))
                    for b in builds_for(spec_dtype, lib, config)]
        check = IsolatedGpuCheck(kernel=lib, spec_path=SPECS / f"{variant}.py", dtype=dtype,
                                 arch=arch, seed=0, silence_s=120, workdir=tmp_path)
        result = check(compiled, source)
        assert result.verification.startswith("PASS"), result.verification
        assert result.time_ms is not None and result.time_ms > 0
