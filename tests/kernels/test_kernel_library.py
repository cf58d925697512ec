"""The kernel library on the CPU: metadata, the spec file, the torch op's fake
implementation and the clear errors for bad inputs."""

from __future__ import annotations

import json

import pytest
import torch
from kernel_helpers import reference_attention

from cubridge.build import NoGpuError, UnsupportedArchError
from cubridge.build.driver import require_cuda_device
from cubridge.kernels import KERNELS_DIR, get_kernel, kernel_names, list_kernels, load_kernel

fa_sm80 = get_kernel("fa_sm80")


def test_registry_lists_fa_sm80_with_its_metadata():
    assert "fa_sm80" in kernel_names()
    meta = get_kernel("fa_sm80").metadata
    assert meta.entry == "fa_sm80_fwd" and meta.source.name == "fa_sm80.cu"
    assert set(meta.head_dims) == {64, 128, 256}
    assert set(meta.dtypes) == {torch.bfloat16, torch.float16}
    assert {"sm_80", "sm_90a"} <= set(meta.compile_only_archs)
    cfg = meta.config(128)
    assert (cfg.block_m, cfg.block_n, cfg.num_warps, cfg.stages) == (128, 64, 4, 2)
    assert meta.config(96) == cfg  # (on the 128 tile, "pads_head_dims")
    cfg256 = meta.config(192)  # (on the 256 tile: 64 x 32, 96 KB of shared memory)
    assert (cfg256.block_m, cfg256.block_n, cfg256.num_warps) == (64, 32, 4)
    with pytest.raises(ValueError, match="no tile config for head dim 100"):
        meta.config(100)
    with pytest.raises(ValueError, match="no kernel 'nope' in the library"):
        get_kernel("nope")


def test_bad_metadata_names_file_and_field(tmp_path, monkeypatch):
    raw = json.loads((KERNELS_DIR / "fa_sm80" / "metadata.json").read_text()) | {"spec": "spec.py"}
    del raw["entry"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "metadata.json").write_text(json.dumps(raw))
    (tmp_path / "broken" / "fa_sm80.cu").write_text("")
    (tmp_path / "broken" / "spec.py").write_text("")
    with pytest.raises(ValueError, match=r"broken/metadata.json: missing field 'entry'"):
        load_kernel(tmp_path / "broken")


@pytest.mark.parametrize("kernel", list_kernels(), ids=lambda k: k.name)
def test_metadata_config_matches_the_cuir_program(kernel):
    """The contract of every library entry: its CuIR's defaults are the config the
    CUDA kernel is built with, and the CuIR accepts every config the metadata lists."""
    program_class = kernel.cuir_class()
    program = program_class()
    first = kernel.cuir_config(kernel.metadata.head_dims[0])
    assert {name: getattr(program, name) for name in first} == first
    for d in kernel.metadata.head_dims:
        program_class(**kernel.cuir_config(d))
        assert set(kernel.compile_defines(d, kernel.metadata.dtypes[0])) >= {
            kernel.metadata.defines["head_dim"]}


@pytest.mark.parametrize("kernel", list_kernels(), ids=lambda k: k.name)
def test_every_entry_runs_its_cuir_against_its_spec_on_the_cpu(kernel):
    from cubridge.attention import Shape
    from cubridge.ir import attention_fn
    from cubridge.verify import verify

    spec = kernel.spec()
    d = kernel.metadata.head_dims[0]
    fn = attention_fn(kernel.cuir_class(), **kernel.cuir_config(d))
    report = verify(spec, fn, shapes=[Shape(1, 2, 1, 70, 130, d)], dtypes=["bf16"], seed=0,
                    require_lse=spec.returns_lse)
    assert report.passed, report.table()


@pytest.mark.parametrize("kernel", list_kernels(), ids=lambda k: k.name)
def test_every_entry_runs_its_cuir_at_head_dims_between_k_steps(kernel):
    """A head dim that is a multiple of 8 but not of 16 (DiT's 72, 40, 136) runs with its
    columns zero-filled to the next 16-column k-step, as the kernels' copies do: the
    executor pads the operands (a 72-wide K was an illegal k16 product before)."""
    from cubridge.attention import Shape
    from cubridge.ir import attention_fn
    from cubridge.verify import verify

    spec = kernel.spec()
    dims = [d for d in (40, 72, 136) if kernel.metadata.supports_dims(d)]
    assert dims, f"{kernel.name} pads no head dim between k-steps"
    for d in dims:
        fn = attention_fn(kernel.cuir_class(), **kernel.cuir_config(d))
        report = verify(spec, fn, shapes=[Shape(1, 2, 1, 70, 130, d)], dtypes=["bf16"], seed=0,
                        require_lse=spec.returns_lse)
        assert report.passed, (d, report.table())


def test_spec_file_loads_and_matches_float64_attention():
    loader = pytest.importorskip("cubridge.spec.loader")
    spec = loader.load(KERNELS_DIR / "common" / "standard_attention_spec.py")
    assert spec.name == "standard_attention" and spec.returns_lse
    q, k, v = torch.randn(1, 4, 9, 64), torch.randn(1, 2, 11, 64), torch.randn(1, 2, 11, 64)
    out, lse = spec.reference(q.double(), k.double(), v.double())
    ref, ref_lse = reference_attention(q, k, v)
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(lse, ref_lse)


@pytest.mark.slow
def test_fake_implementation_gives_output_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 8, 100, 128, dtype=torch.bfloat16)
        k = torch.empty(2, 2, 70, 128, dtype=torch.bfloat16)
        out, lse = torch.ops.cubridge.attention_fwd(q, k, k, [], 0.1, "any-key")
        assert out.shape == (2, 8, 100, 128) and out.dtype == torch.bfloat16
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32


def test_bad_inputs_are_rejected_before_any_gpu_work():
    q = torch.randn(1, 4, 64, 128, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match="q has dtype torch.float32"):
        fa_sm80.attention(q.float(), q.float(), q.float())
    with pytest.raises(ValueError, match="must be 4-D"):
        fa_sm80.attention(q[0], q, q)
    with pytest.raises(ValueError, match="contiguous in its last dim"):
        fa_sm80.attention(q.transpose(2, 3), q, q)
    with pytest.raises(ValueError, match="16-byte aligned rows"):
        fa_sm80.attention(q[..., 1:121], q[..., :120], q[..., :120])
    with pytest.raises(ValueError, match="q is on cpu; the kernel needs CUDA tensors"):
        fa_sm80.attention(q, q, q)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error")
def test_no_gpu_is_a_clear_error():
    with pytest.raises(NoGpuError, match="no CUDA GPU available"):
        require_cuda_device()


def test_too_old_arch_is_rejected():
    with pytest.raises(UnsupportedArchError, match="needs sm_80 or newer; this device is sm_75"):
        fa_sm80.compile(128, torch.bfloat16, "sm_75")
