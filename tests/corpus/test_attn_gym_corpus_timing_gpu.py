"""attention-gym's mods timed at benchmark scale: every taken corpus mod made
for llama2_7b's heads at 16k tokens (B = 8, S = 2048, D = 128, bf16; lengths,
windows, canvases and documents scaled so each mask keeps its density), run
through the benchmark's loop (cubridge.bench.runner): one set of inputs, the
mods' float64 attention, then cubridge.flex_attention and every peer of the
benchmark (SDPA with the mods' dense mask or bias, Flex Triton, Flex FLASH, FA4
with its own flags where they express the mod) each checked against it and only
then timed.

Ours must verify and be timed; a peer that cannot run a mod is recorded with
its reason (a peer's failure is not ours). The results (json, markdown, PNG)
go to $CUBRIDGE_CORPUS_TIMING_OUT, else a pytest temporary folder, rewritten
after every case (a run cut short keeps what it measured). A long run splits
into shards, CUBRIDGE_CORPUS_SHARD=i/n (the cases whose index is i mod n);
`cubridge bench --merge` joins their results.
"""

from __future__ import annotations

import os
import re
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from attn_gym_corpus import TAKEN, Case, Size

from cubridge.attention import HEAD_CONFIGS, Shape
from cubridge.bench.ours import flex_attention_impl
from cubridge.bench.peers import peer_impls
from cubridge.bench.report import collect_metadata, invocation, write_reports
from cubridge.bench.runner import OK, BenchConfig, CaseResult, run_case
from cubridge.bench.timing import TimingSettings, do_bench_timer
from cubridge.build.driver import device_arch
from cubridge.lower.hook_header import generate_header
from cubridge.pipeline import flex
from cubridge.pipeline.variant import rules_variant
from cubridge.spec import from_mods

pytest.importorskip("attn_gym", reason="attention-gym (pip install attn-gym)")
pytestmark = [pytest.mark.gpu, pytest.mark.slow]

CONFIG = HEAD_CONFIGS["llama2_7b"]
SIZE = Size(b=8, h=CONFIG.hq, n=2048)  # 16k tokens per batch, as docs/benchmark.md
DTYPE = torch.bfloat16
PEERS = ["sdpa", "flex_triton", "flex_flash", "fa4"]  # docs/benchmark.md's order
RESULTS: list[CaseResult] = []


def _shard(cases: tuple[Case, ...]) -> list[Case]:
    shard = os.environ.get("CUBRIDGE_CORPUS_SHARD", "0/1")
    i, n = (int(x) for x in shard.split("/"))
    return [c for j, c in enumerate(cases) if j % n == i]


CASES = _shard(TAKEN)


def _ident(c: Case) -> str:
    return re.sub(r"\W+", "_", c.name.split("(")[0].strip()).strip("_")


def _shape(c: Case) -> Shape:
    sq, sk = c.lengths(SIZE)
    return Shape(SIZE.b, CONFIG.hq, CONFIG.hk, sq, sk, CONFIG.d)


@pytest.fixture(scope="module")
def prebuilt():
    """Our kernels compiled ahead, in parallel, from the plans the first calls build."""
    arch = device_arch(torch.device("cuda"))
    variants = []
    for c in CASES:
        score_mod, mask_mod = c.make("cuda", SIZE)
        spec, lib, plan = flex.plan_call(score_mod, mask_mod, _shape(c), DTYPE, arch)
        variants.append(rules_variant(spec, lib, generate_header(plan)))
        del score_mod, mask_mod
    torch.cuda.empty_cache()
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda v: v.compile(arch), variants))
    return arch


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    out = os.environ.get("CUBRIDGE_CORPUS_TIMING_OUT")
    path = Path(out) if out else tmp_path_factory.mktemp("attn_gym_timing")
    yield path
    print(f"\nattention-gym timing: {path}")


def _write(path: Path) -> None:
    meta = collect_metadata(invocation(sys.argv), "cuda",
                            "triton.testing.do_bench, median, L2 flushed; warm-up 25 ms, 100 ms",
                            extra={"corpus_size": f"B={SIZE.b} Hq={CONFIG.hq} Hk={CONFIG.hk} "
                                                  f"n={SIZE.n}",
                                   "shard": os.environ.get("CUBRIDGE_CORPUS_SHARD", "0/1")})
    write_reports(path, meta, RESULTS)


@pytest.mark.parametrize("c", CASES, ids=[_ident(c) for c in CASES])
def test_verified_then_timed_against_every_peer(prebuilt, report_dir, c):
    score_mod, mask_mod = c.make("cuda", SIZE)
    shape = _shape(c)
    spec = from_mods(score_mod, mask_mod, name=_ident(c), configs=[CONFIG],
                     seq_lens=[shape.sq], dtypes=[DTYPE])
    impls = [flex_attention_impl("ours"), *peer_impls(PEERS)]
    config = BenchConfig(seq_lens=[shape.sq], configs=[CONFIG.name], dtype=DTYPE)
    result = run_case(spec, CONFIG, shape.sq, impls, config, do_bench_timer(TimingSettings()),
                      shape=shape)
    RESULTS.append(result)
    _write(report_dir)
    by_name = {r.impl: r for r in result.impls}
    ours = by_name["ours"]
    assert ours.status == OK, f"{c.name}: {ours.status}: {ours.reason}"
    assert ours.tflops is not None and ours.tflops > 0 and ours.rel_err is not None
    for name in PEERS:
        peer = by_name[name]
        assert peer.status == OK or peer.reason, f"{name} on {c.name}: no reason recorded"
