"""Adding a kernel is adding a directory: a second library entry (fa_sm80's
source with another tile configuration) found through $CUBRIDGE_KERNEL_DIRS,
selected by `--kernel` and built by `cubridge run` with no pipeline edit; an
entry with its own LibraryKernel subclass (tile-config type, launch ABI); and
a directory without metadata.json, which is not an entry."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from cubridge.build.attention_op import KernelInfo
from cubridge.cli import main
from cubridge.kernels import (
    KERNEL_DIRS_ENV,
    KernelBuild,
    LibraryKernel,
    get_kernel,
    kernel_names,
    register_kernel,
    select_kernel,
    unregister_kernel,
)
from cubridge.kernels.abi import FWD_PARAMS_FIELDS, FwdParams

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "examples" / "specs"
ENTRY = "fa_sm80_n32"


def derived_entry(root: Path, name: str = ENTRY, block_n: int = 32, priority: int = -1,
                  **extra: object) -> Path:
    """A copy of fa_sm80 (source, spec) whose metadata tiles keys by `block_n`."""
    base = get_kernel("fa_sm80")
    directory = root / name
    directory.mkdir(parents=True)
    shutil.copyfile(base.source, directory / f"{name}.cu")
    shutil.copyfile(base.spec_path, directory / "spec.py")
    meta = json.loads((base.directory / "metadata.json").read_text())
    meta.update(name=name, source=f"{name}.cu", spec="spec.py", priority=priority,
                description=f"fa_sm80 with {block_n}-key blocks", **extra)
    for cfg in meta["configs"].values():
        cfg["block_n"] = block_n
    (directory / "metadata.json").write_text(json.dumps(meta, indent=1))
    return directory


@pytest.fixture
def library(tmp_path, monkeypatch):
    root = tmp_path / "library"
    derived_entry(root)
    monkeypatch.setenv(KERNEL_DIRS_ENV, str(root))
    return root


def test_a_directory_is_an_entry_and_select_kernel_honours_kernel(library):
    assert {"fa_sm80", ENTRY} <= set(kernel_names())
    entry = get_kernel(ENTRY)
    assert entry.config(128).block_n == 32 and entry.table_block(128) == (32, 32)
    assert entry.cuir_class() is get_kernel("fa_sm80").cuir_class()  # the same CuIR program
    assert entry.compile_defines(128, torch.bfloat16)["CUBRIDGE_BLOCK_N"] == 32
    # By priority the original entry is chosen (on Hopper: fa_sm90); --kernel (by name or
    # object) overrides.
    assert select_kernel("sm_86", 128, torch.bfloat16, "softmax").name == "fa_sm80"
    assert select_kernel("sm_90a", 128, torch.bfloat16, "softmax").name == "fa_sm90"
    assert select_kernel("sm_90a", 128, torch.bfloat16, kernel=ENTRY) is entry
    assert select_kernel(kernel=entry) is entry
    with pytest.raises(ValueError, match="no kernel 'nope' in the library"):
        select_kernel(kernel="nope")


def test_selection_by_arch_head_dim_dtype_and_priority(tmp_path, monkeypatch):
    root = tmp_path / "library"
    derived_entry(root, "fa_sm80_first", priority=5, head_dims=[128], pads_head_dims=False,
                  configs={"128": {"block_m": 128, "block_n": 32, "num_warps": 4, "stages": 2}})
    monkeypatch.setenv(KERNEL_DIRS_ENV, str(root))
    assert select_kernel("sm_86", 128, torch.bfloat16).name == "fa_sm80_first"
    assert select_kernel("sm_86", 64, torch.bfloat16).name == "fa_sm80"  # D64: not in it
    assert select_kernel("sm_90a", 128, torch.bfloat16).name == "fa_sm90"  # priority 10
    assert select_kernel(None, 128, torch.bfloat16).name == "fa_sm80_first"  # no device: sm_80
    assert "needs sm_80 or newer" in get_kernel("fa_sm80").unsupported(arch="sm_75")
    with pytest.raises(ValueError, match="no library kernel runs on sm_75"):
        select_kernel("sm_75", 128, torch.bfloat16)


def test_a_directory_without_metadata_is_not_an_entry(tmp_path, monkeypatch):
    root = tmp_path / "library"
    (root / "cuir_only").mkdir(parents=True)
    (root / "cuir_only" / "cuir.py").write_text("# a CuIR program waiting for its kernel\n")
    monkeypatch.setenv(KERNEL_DIRS_ENV, str(root))
    assert "cuir_only" not in kernel_names()
    with pytest.raises(ValueError, match="no kernel 'cuir_only'"):
        get_kernel("cuir_only")


def test_a_tile_field_without_a_macro_is_fixed_by_the_source():
    fa = get_kernel("fa_sm80")
    three_stages = dataclasses.replace(fa.config(128), stages=3)
    with pytest.raises(ValueError, match="stages is fixed at 2 by fa_sm80.cu"):
        fa.compile_defines(128, torch.bfloat16, three_stages)
    build = fa.build_for(128, config={"block_n": 32, "causal": True}, causal=True)
    assert dict(build.config)["block_n"] == 32 and build.causal
    assert KernelBuild.from_json(json.loads(json.dumps(build.to_json()))) == build


# -- an entry with its own LibraryKernel subclass --------------------------------------------

KERNEL_PY = '''
import ctypes
from dataclasses import dataclass

from cubridge.kernels import LibraryKernel
from cubridge.kernels.abi import Launch, fill_fwd_params, tensor_map_params


@dataclass(frozen=True)
class WarpgroupTiles:
    block_m: int
    block_n: int
    consumer_warpgroups: int
    stages: int

    def cuir_kwargs(self):
        return {"block_m": self.block_m, "block_n": self.block_n, "stages": self.stages}

    @property
    def table_rows(self):
        return self.block_m // self.consumer_warpgroups


TmaParams = tensor_map_params(4)


class PersistentKernel(LibraryKernel):
    config_type = WarpgroupTiles

    def launch(self, info, q, k, v, out, lse, scale, aux):
        params = fill_fwd_params(TmaParams(), q, k, v, out, lse, scale, aux)
        return Launch(self.entry, (132, 1, 1), (info.threads, 1, 1), info.smem_bytes, params)
'''


def test_an_entry_brings_its_own_config_type_and_launch_abi(tmp_path):
    directory = derived_entry(tmp_path, "persistent", **{"class": "kernel.py:PersistentKernel"})
    meta = json.loads((directory / "metadata.json").read_text())
    meta["defines"]["consumer_warpgroups"] = "CUBRIDGE_CONSUMER_WARPGROUPS"
    meta["configs"] = {d: {"block_m": 128, "block_n": 128, "consumer_warpgroups": 2,
                           "stages": 2} for d in meta["configs"]}
    (directory / "metadata.json").write_text(json.dumps(meta))
    (directory / "kernel.py").write_text(KERNEL_PY)
    kernel = register_kernel(directory)
    try:
        assert type(kernel).__name__ == "PersistentKernel" and get_kernel("persistent") is kernel
        assert kernel.config(128).consumer_warpgroups == 2
        assert kernel.table_block(128) == (64, 128)
        assert kernel.cuir_config(128) == {"block_m": 128, "block_n": 128, "stages": 2}
        assert kernel.compile_defines(64, torch.float16)["CUBRIDGE_CONSUMER_WARPGROUPS"] == 2
        q = torch.zeros(1, 2, 300, 64)
        info = KernelInfo(128, 128, 384, 1000, "softmax", 64, 2)
        launch = kernel.launch(info, q, q, q, q, torch.zeros(1, 2, 300), 0.125, [])
        assert launch.grid == (132, 1, 1) and launch.block == (384, 1, 1)
        # Four 128-byte descriptors, then the FwdParams fields, as the entry's struct says,
        # padded to CUtensorMap's 64-byte alignment.
        assert type(launch.params).maps.offset == 0
        assert type(launch.params).q.offset == 512
        assert launch.params.seqlen_q == 300 and launch.params.heads_q == 2
        size = ctypes.sizeof(launch.params)
        assert size % 64 == 0 and 512 + ctypes.sizeof(FwdParams) <= size < 576 + \
            ctypes.sizeof(FwdParams)
        assert [n for n, _ in FWD_PARAMS_FIELDS][0] == "q"
        # The op launches whatever the entry's ABI builds.
        runnable = kernel.attention_kernel(object(), 64, torch.float16)  # type: ignore[arg-type]
        assert runnable.launch == kernel.launch
    finally:
        unregister_kernel("persistent")
    assert "persistent" not in kernel_names()


def test_the_default_abi_is_one_cta_per_query_block_head_and_batch():
    fa = get_kernel("fa_sm80")
    q, k = torch.zeros(2, 4, 300, 64), torch.zeros(2, 2, 500, 64)
    info = KernelInfo(128, 64, 128, 1000, "softmax", 64, 2)
    launch = fa.launch(info, q, k, k, q, torch.zeros(2, 4, 300), 0.125, [])
    assert launch.grid == (3, 4, 2) and launch.entry == "fa_sm80_fwd"
    assert isinstance(launch.params, FwdParams) and launch.params.seqlen_k == 500


def test_library_entries_are_plain_objects_to_the_pipeline():
    """No module outside the kernel's own directory names it (docs/architecture.md: adding a
    kernel is adding a directory)."""
    package = ROOT / "cubridge"
    named = [str(p.relative_to(ROOT)) for p in package.rglob("*.py")
             if "fa_sm80" in p.read_text() and "kernels/fa_sm80" not in str(p)]
    assert named == []
    assert issubclass(type(get_kernel("fa_sm80")), LibraryKernel)


# -- `cubridge run --kernel` on the second entry ----------------------------------------------

@pytest.mark.slow  # nvcc builds: half a minute on two cores
@pytest.mark.nvcc
@pytest.mark.skipif(torch.cuda.is_available(), reason="the GPU part is the test below")
def test_cubridge_run_builds_a_variant_on_the_second_entry(library, tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", str(SPECS / "sliding_window_1024.py"), "--kernel", ENTRY,
                 "--out", str(out), "--arch", "sm_90a", "--no-bench"])
    err = capsys.readouterr().err
    assert code == 3 and "no CUDA GPU visible: stopped after compiling" in err
    assert f"[route] deterministic hook rules on {ENTRY}" in err
    lower = json.loads((out / "lower.json").read_text())
    assert lower["kernel"] == ENTRY and {b["config"]["block_n"] for b in lower["builds"]} == {32}
    assert json.loads((out / "transfer.json").read_text())["config"]["block_n"] == 32
    assert "PASS" in (out / "verify_ir.txt").read_text()  # the CuIR ran with 32-key blocks
    assert json.loads((out / "plan.json").read_text())["hooks"]["table_block"] == [32, 32]
    # The cubins were built from the entry's source with its tile macros.
    recipes = [json.loads(p.read_text()) for p in _cache_recipes(out)]
    assert recipes and all(["CUBRIDGE_BLOCK_N", "32"] in r["defines"] for r in recipes)
    assert all(r["source_name"].endswith(f"{ENTRY}.cu") for r in recipes)


def _cache_recipes(run_dir: Path) -> list[Path]:
    """The cache entries of the run's cubins (matched by content)."""
    from cubridge.build.compile import cache_root

    cubins = {p.read_bytes() for p in run_dir.glob("*.cubin")}
    return [d / "recipe.json" for d in (cache_root() / "cubin").glob("*/*")
            if (d / "kernel.cubin").is_file() and (d / "kernel.cubin").read_bytes() in cubins]


@pytest.mark.gpu
def test_cubridge_run_verifies_and_times_a_variant_on_the_second_entry(library, tmp_path):
    from cubridge.pipeline.run import RunOptions, run

    out = tmp_path / "run"
    result = run(SPECS / "sliding_window_1024.py", RunOptions(
        kernel=ENTRY, out=out, bench_seq_lens=[2048], bench_configs=["llama2_7b"],
        bench_peers=["sdpa"], log=print))
    assert not result.stopped, result.stopped
    assert result.kernel is not None and result.kernel.kernel.name == ENTRY
    assert "PASS" in result.stages["verify-gpu"].summary
    bench = json.loads((out / "bench" / "results.json").read_text())
    ours = [i for c in bench["results"] for i in c["impls"] if i["impl"] == "ours"]
    assert ours and all(i["status"] == "ok" for i in ours)


# -- QK/V head-dim pairs an entry builds as they are ("head_dim_pairs") -------------------

def test_an_entry_declares_the_head_dim_pairs_it_builds(tmp_path, monkeypatch):
    root = tmp_path / "library"
    pair = {"block_m": 128, "block_n": 32, "num_warps": 4, "stages": 2}
    derived_entry(root, "fa_sm80_pairs", head_dim_pairs={"192/128": pair}, pads_head_dims=False,
                  head_dims=[64, 128])
    monkeypatch.setenv(KERNEL_DIRS_ENV, str(root))
    entry = get_kernel("fa_sm80_pairs")
    assert entry.metadata.supports_dims(192, 128) and not entry.metadata.supports_dims(192)
    assert entry.metadata.dims_text() == "64, 128 (QK = V); QK/V 192/128"
    assert entry.unsupported(head_dim=192, head_dim_v=128) == ""
    assert entry.unsupported(head_dim=128, head_dim_v=64) == \
        "QK/V head dims 128/64 not among 64, 128 (QK = V); QK/V 192/128"
    assert entry.config(192, 128).block_n == 32 and entry.table_block(192, 128) == (32, 32)
    defines = entry.compile_defines(192, torch.bfloat16, head_dim_v=128)
    assert defines["CUBRIDGE_HEAD_DIM"] == 192 and defines["CUBRIDGE_HEAD_DIM_V"] == 128
    assert entry.build_for(192, 128) == KernelBuild(
        192, 128, tuple(sorted(pair.items())), False)


@pytest.mark.parametrize(("pairs", "defines_v", "error"), [
    ({"192x128": {}}, True, "'head_dim_pairs' keys are QK/V head dims such as '192/128'"),
    ({"128/128": {}}, True, "'head_dim_pairs' '128/128' has equal head dims"),
    ({"192/128": {"block_m": 128}}, True, "bad tile config for TileConfig in 'head_dim_pairs'"),
    ({"192/128": {"block_m": 128, "block_n": 64, "num_warps": 4, "stages": 2}}, False,
     "'head_dim_pairs' needs a 'head_dim_v' macro in 'defines'"),
])
def test_bad_head_dim_pairs_name_the_file_and_field(tmp_path, pairs, defines_v, error):
    from cubridge.kernels.library import read_metadata

    directory = derived_entry(tmp_path, "bad_pairs", head_dim_pairs=pairs)
    path = directory / "metadata.json"
    if not defines_v:
        meta = json.loads(path.read_text())
        del meta["defines"]["head_dim_v"]
        path.write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"metadata.json: {error}"):
        read_metadata(path)
