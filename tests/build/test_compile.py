"""nvcc -> cubin: the content cache, the ptxas report kept with the artifact,
compile errors with file and line, and CuTe headers from nvidia-cutlass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubridge.build import CompileError, NvccNotFoundError, compile_cuda, cutlass_include_dir
from cubridge.build import nvcc as nvcc_module

pytestmark = [pytest.mark.nvcc, pytest.mark.slow]

SCALE_KERNEL = """\
#include "cubridge_hooks.cuh"
extern "C" __global__ void scale(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = cubridge_hooks::activation(x[i]) * FACTOR;
}
"""
HOOKS = """\
#pragma once
#include "hook_types.cuh"
namespace cubridge_hooks {
CUBRIDGE_HD float activation(float s) { return s > 0.f ? s : 0.f; }
}
"""


def test_cache_key_covers_source_hooks_defines_and_arch(tmp_path):
    build = lambda **kw: compile_cuda(SCALE_KERNEL, cache_dir=tmp_path, **{
        "arch": "sm_80", "hooks_header": HOOKS, "defines": {"FACTOR": 2}, **kw})
    first = build()
    assert not first.from_cache
    again = build()
    assert again.from_cache and again.key == first.key and again.cubin() == first.cubin()
    keys = {first.key,
            build(defines={"FACTOR": 3}).key,
            build(arch="sm_90a").key,
            build(hooks_header=HOOKS.replace("0.f ? s", "1.f ? s")).key}
    assert len(keys) == 4
    res = first.resources_of("scale")
    assert res.arch == "sm_80" and 0 < res.registers < 64 and not res.spills
    recipe = json.loads((first.directory / "recipe.json").read_text())
    assert recipe["arch"] == "sm_80" and "release" in recipe["nvcc"]
    assert (first.directory / "cubridge_hooks.cuh").read_text() == HOOKS
    assert "Used" in first.log


def test_the_base_flags_are_in_the_key(tmp_path, monkeypatch):
    """A build without -lineinfo (same_cubins.py strips it to compare cubins) is never
    served the cached one built with it, nor the other way round."""
    import cubridge.build.compile as compile_module

    build = lambda: compile_cuda(SCALE_KERNEL, cache_dir=tmp_path, arch="sm_80",  # noqa: E731
                                 hooks_header=HOOKS, defines={"FACTOR": 2})
    with_lines = build()
    monkeypatch.setattr(compile_module, "BASE_FLAGS",
                        tuple(f for f in compile_module.BASE_FLAGS if f != "-lineinfo"))
    without = build()
    assert not without.from_cache and without.key != with_lines.key


def test_a_headers_leading_comments_are_not_in_the_key(tmp_path):
    """A generated header's first lines name its spec's path: the same hooks from
    another checkout are a cache hit. Code, and the line count, stay in the key."""
    build = lambda hooks: compile_cuda(SCALE_KERNEL, cache_dir=tmp_path, arch="sm_80",
                                       hooks_header=hooks, defines={"FACTOR": 2})
    here = build(f"// hooks for spec 'relu' (/work/main/relu.py).\n{HOOKS}")
    elsewhere = build(f"// hooks for spec 'relu2' (/tmp/clone/relu.py).\n{HOOKS}")
    assert elsewhere.from_cache and elsewhere.key == here.key
    assert build(f"//\n//\n{HOOKS}").key != here.key  # one more line: another line table
    assert build(f"// hooks\n{HOOKS}// a trailing comment is code's\n").key != here.key


def test_a_partial_cache_entry_is_built_again(tmp_path):
    """A cache folder that lost its ptxas report (a copy or clean-up cut short)
    is a miss, not a FileNotFoundError at load time."""
    build = lambda: compile_cuda(SCALE_KERNEL, cache_dir=tmp_path, arch="sm_80",
                                 hooks_header=HOOKS, defines={"FACTOR": 2})
    first = build()
    (first.directory / "resources.json").unlink()
    again = build()
    assert not again.from_cache and again.key == first.key
    assert again.resources_of("scale").registers > 0
    assert build().from_cache


def test_compile_errors_name_file_and_line(tmp_path):
    bad = SCALE_KERNEL.replace("x[i] =", "undefined_thing; x[i] =")
    with pytest.raises(CompileError) as info:
        compile_cuda(bad, arch="sm_80", hooks_header=HOOKS, defines={"FACTOR": 1},
                     cache_dir=tmp_path)
    assert "kernel.cu (source text):4: error:" in str(info.value)
    assert "undefined_thing" in str(info.value)
    assert info.value.diagnostics and info.value.diagnostics[0][1] == 4
    bad_hooks = HOOKS.replace("return s", "return q")
    with pytest.raises(CompileError, match=r"cubridge_hooks.cuh \(generated\):4: error"):
        compile_cuda(SCALE_KERNEL, arch="sm_80", hooks_header=bad_hooks,
                     defines={"FACTOR": 1}, cache_dir=tmp_path)
    assert not list((tmp_path / "cubin").rglob("kernel.cubin"))  # failures are not cached


def test_missing_nvcc_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(nvcc_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(nvcc_module, "FALLBACK_ROOTS", ())
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    with pytest.raises(NvccNotFoundError, match="nvcc not found"):
        compile_cuda(SCALE_KERNEL, arch="sm_80", cache_dir=tmp_path)


def test_cute_headers_from_nvidia_cutlass_compile_for_sm90a(tmp_path):
    include = cutlass_include_dir()
    assert (include / "cute" / "tensor.hpp").is_file()
    source = """\
#include <cute/tensor.hpp>
extern "C" __global__ void copy_tile(const float* src, float* dst) {
  using namespace cute;
  auto layout = make_layout(make_shape(Int<8>{}, Int<4>{}), LayoutRight{});
  Tensor s = make_tensor(make_gmem_ptr(src), layout);
  Tensor d = make_tensor(make_gmem_ptr(dst), layout);
  d(threadIdx.x % 8, threadIdx.x / 8 % 4) = s(threadIdx.x % 8, threadIdx.x / 8 % 4);
}
"""
    compiled = compile_cuda(source, arch="sm_90a", use_cutlass=True, cache_dir=tmp_path)
    assert compiled.resources_of("copy_tile").registers > 0
    assert compiled.cubin_path.stat().st_size > 0


def test_source_file_must_exist(tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        compile_cuda(Path(tmp_path / "nope.cu"), arch="sm_80", cache_dir=tmp_path)
