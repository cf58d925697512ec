"""Report writers: JSON, markdown and PNG each record device, date, commit and
command; the CLI refuses to measure without a GPU and can re-render a JSON."""

from __future__ import annotations

import json
import re

import pytest

from cubridge.bench.peers import Impl, Prepared, peer_impls
from cubridge.bench.report import (
    collect_metadata,
    git_commit,
    invocation,
    load_json,
    median_of_repeats,
    merge_results,
    merged_timing,
    write_reports,
)
from cubridge.bench.runner import OK, BenchConfig, CaseResult, ImplResult, run_bench
from cubridge.bench.timing import wallclock_timer
from cubridge.cli import main

COMMAND = "cubridge bench causal --seq-lens 32,64 --configs tiny"


@pytest.fixture
def results(specs):
    def wrong(case):
        return Prepared(lambda: case.q * 0)

    impls = [*peer_impls(["eager", "sdpa", "fa4"]), Impl("zeros", wrong)]
    return run_bench([specs["causal"], specs["alibi_causal"]], impls,
                     BenchConfig(seq_lens=(32, 64), configs=("tiny",), tokens=128,
                                 device="cpu"), wallclock_timer(2), progress=lambda _: None)


@pytest.mark.slow
def test_reports_record_provenance(tmp_path, results):
    meta = collect_metadata(COMMAND, "cpu", "wall clock (test)")
    paths = write_reports(tmp_path / "run", meta, results)
    assert set(paths) == {"json", "markdown", "png"}

    data = json.loads(paths["json"].read_text())
    for key in ("device", "date", "commit", "command", "torch", "triton"):
        assert data["meta"][key], key
    assert data["meta"]["command"] == COMMAND
    assert data["meta"]["device"].startswith("CPU")
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", data["meta"]["commit"])
    assert len(data["results"]) == 4

    md = paths["markdown"].read_text()
    for value in (meta["device"], meta["date"], meta["commit"], COMMAND):
        assert value in md
    assert "| causal | tiny | 32 |" in md
    assert "FAIL" in md and "zeros (wrong): failed verification" in md
    assert "fa4 (unsupported)" in md

    png = paths["png"].read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    from PIL import Image

    info = json.loads(Image.open(paths["png"]).text["Description"])
    assert info["device"] == meta["device"] and info["commit"] == meta["commit"]
    assert info["command"] == COMMAND and info["date"] == meta["date"]


@pytest.mark.slow
def test_json_round_trips_and_cli_rerenders(tmp_path, results):
    meta = collect_metadata(COMMAND, "cpu", "wall clock (test)")
    paths = write_reports(tmp_path, meta, results)
    paths["markdown"].unlink()
    paths["png"].unlink()
    meta2, results2 = load_json(paths["json"])
    assert meta2 == meta and results2 == results
    assert main(["bench", "--render", str(paths["json"])]) == 0
    assert paths["markdown"].is_file() and paths["png"].is_file()


def test_load_json_rejects_other_files(tmp_path):
    other = tmp_path / "x.json"
    other.write_text(json.dumps({"meta": {}, "results": []}))
    with pytest.raises(ValueError, match="not a cubridge bench result"):
        load_json(other)


def test_git_commit_is_the_checkout_head(tmp_path, monkeypatch):
    monkeypatch.delenv("CUBRIDGE_COMMIT", raising=False)
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", git_commit())
    # A copy of the tree without .git (the device machine) names its commit by env var.
    monkeypatch.delenv("CUBRIDGE_COMMIT", raising=False)
    assert git_commit(tmp_path).startswith("unknown (not a git checkout")
    monkeypatch.setenv("CUBRIDGE_COMMIT", "abc1234")
    assert git_commit(tmp_path) == "abc1234 (from CUBRIDGE_COMMIT)"
    assert git_commit() == "abc1234 (from CUBRIDGE_COMMIT)"


def test_command_is_recorded_as_typed():
    assert invocation(["/usr/local/bin/cubridge", "bench", "full", "--name", "a b"]) == \
        "cubridge bench full --name 'a b'"
    assert invocation(["/repo/cubridge/cli.py", "bench", "causal"]) == \
        "python -m cubridge.cli bench causal"


def test_bench_without_gpu_says_so(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert main(["bench", "causal"]) == 2
    assert "no CUDA GPU" in capsys.readouterr().err


def test_bench_needs_variants(capsys):
    assert main(["bench"]) == 2
    assert "name variants" in capsys.readouterr().err


def test_spec_names_resolve_with_clear_errors(tmp_path):
    from cubridge.bench.commands import resolve_spec_path

    with pytest.raises(FileNotFoundError, match="no spec 'no_such_variant'"):
        resolve_spec_path("no_such_variant")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_spec_path(str(tmp_path / "missing.py"))
    spec_file = tmp_path / "mine.py"
    spec_file.write_text("")
    assert resolve_spec_path(str(spec_file)) == spec_file


def test_bad_arguments_are_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "causal", "--seq-lens", "1k"])
    assert "comma-separated integers" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bench", "causal", "--impl", "no-equals-sign"])
    assert "NAME=TARGET" in capsys.readouterr().err


SPEC_FILE = '''
"""Causal attention (a test spec in the documented file format)."""
from cubridge.attention import HeadConfig
from cubridge.spec.helpers import expand_kv, positions, scaled_scores, softmax_attention

NAME = "tiny_causal"
DESCRIPTION = "causal"
CONFIGS = [HeadConfig("tiny", 4, 2, 16)]
SEQ_LENS = [32]
DTYPES = ["bf16"]


def reference(q, k, v):
    q_idx, kv_idx = positions(q, k)
    k, v = expand_kv(q, k, v)
    return softmax_attention(scaled_scores(q, k), q_idx >= kv_idx, v)


def mask_mod(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx
'''


@pytest.mark.slow
def test_cli_end_to_end_on_cpu(tmp_path, capsys):
    spec_file = tmp_path / "tiny_causal.py"
    spec_file.write_text(SPEC_FILE)
    argv = ["bench", str(spec_file), "--device", "cpu", "--seq-lens", "16,32", "--tokens", "64",
            "--configs", "tiny", "--peers", "eager,sdpa,fa4", "--ours", "none",
            "--out-dir", str(tmp_path), "--name", "smoke"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| tiny_causal | tiny | 32 |" in out  # the short table at the end
    data = json.loads((tmp_path / "smoke" / "results.json").read_text())
    assert "not a measurement" in data["meta"]["timing"]
    statuses = {(r["seq_len"], i["impl"]): i["status"] for r in data["results"]
                for i in r["impls"]}
    assert statuses[(32, "sdpa")] == "ok" and statuses[(16, "eager")] == "ok"
    assert statuses[(32, "fa4")] in ("unsupported", "ok")
    assert (tmp_path / "smoke" / "results.md").is_file()


@pytest.mark.slow
def test_cli_rounds_on_cpu(tmp_path, capsys):
    spec_file = tmp_path / "tiny_causal.py"
    spec_file.write_text(SPEC_FILE)
    argv = ["bench", str(spec_file), "--device", "cpu", "--seq-lens", "32", "--tokens", "64",
            "--configs", "tiny", "--peers", "eager,sdpa", "--ours", "none", "--rounds", "3",
            "--out-dir", str(tmp_path), "--name", "rounds"]
    assert main(argv) == 0
    data = json.loads((tmp_path / "rounds" / "results.json").read_text())
    assert "3 interleaved rounds per case" in data["meta"]["timing"]
    (r,) = data["results"]
    assert all(i["status"] == "ok" and "median of 3 rounds" in i["note"] for i in r["impls"])
    with pytest.raises(SystemExit):
        main(["bench", str(spec_file), "--device", "cpu", "--rounds", "0"])
    assert "expected at least 1" in capsys.readouterr().err
    # two implementations of one name: refused (results are reported by name)
    assert main(["bench", str(spec_file), "--device", "cpu", "--ours", "none", "--peers", "sdpa",
                 "--impl", "sdpa=cubridge.kernels:attention"]) == 2
    assert "two implementations named sdpa" in capsys.readouterr().err


@pytest.mark.slow
def test_runs_on_one_device_merge_into_one_report(tmp_path, results):
    first, second = tmp_path / "a", tmp_path / "b"
    write_reports(first, collect_metadata("cubridge bench causal", "cpu", "t"), results[:2])
    write_reports(second, collect_metadata("cubridge bench alibi_causal", "cpu", "t"),
                  results[2:])
    argv = ["bench", "--merge", str(first / "results.json"), str(second / "results.json"),
            "--out-dir", str(tmp_path), "--name", "both"]
    assert main(argv) == 0
    meta, merged = load_json(tmp_path / "both" / "results.json")
    assert merged == results
    assert [m["command"] for m in meta["merged_from"]] == ["cubridge bench causal",
                                                           "cubridge bench alibi_causal"]
    assert meta["timing"] == collect_metadata("x", "cpu", "t")["timing"]
    # Runs at two commits: the report names both and which run was which.
    head = (tmp_path / "both" / "results.md").read_text()
    assert f"- commit: {meta['commit']}\n" in head  # (one commit here)
    other = json.loads((second / "results.json").read_text())
    other["meta"]["commit"] = "abc1234 (from CUBRIDGE_COMMIT)"
    (second / "results.json").write_text(json.dumps(other))
    assert main(argv) == 0
    head = (tmp_path / "both" / "results.md").read_text()
    assert f"- commit: {meta['commit']} (run 1); abc1234 (from CUBRIDGE_COMMIT) (run 2)\n" in head
    first_date, second_date = (m["date"] for m in load_json(tmp_path / "both" / "results.json")[0]
                               ["merged_from"])
    assert (f"- date: {first_date}\n" in head if first_date == second_date else
            f"- date: {first_date} to {second_date} (2 runs merged)\n" in head)
    other = json.loads((second / "results.json").read_text())
    other["meta"]["device"] = "NVIDIA H100 80GB HBM3"
    (second / "results.json").write_text(json.dumps(other))
    assert main(argv) == 2


def test_merged_runs_timed_differently_say_which_was_which():
    # (device_variants.sh times S = 4096 for longer than the other lengths)
    long, short = "do_bench, warmup 25.0 ms, rep 100.0 ms", "do_bench, warmup 10.0 ms, rep 30.0 ms"
    assert merged_timing([long, long]) == long
    assert merged_timing([long, long, short, short, short]) == (
        f"runs 1, 2: {long}; runs 3, 4, 5: {short}")


def test_merging_merged_reports_lists_every_run_once_and_numbers_their_timings_together():
    long, short = "do_bench, warmup 25.0 ms, rep 100.0 ms", "do_bench, warmup 10.0 ms, rep 30.0 ms"

    def run(commit: str, timing: str) -> tuple[dict, list]:
        return {"device": "H100", "date": f"d-{commit}", "commit": commit,
                "command": f"bench {commit}", "timing": timing}, []

    inner = merge_results([run("a", long), run("b", short)])
    outer_meta, _ = merge_results([run("c", short), inner])
    assert [m["commit"] for m in outer_meta["merged_from"]] == ["c", "a", "b"]
    assert outer_meta["timing"] == f"runs 1, 3: {short}; runs 2: {long}"
    # a report merged before each run kept its timing: read back from its timing line
    legacy = dict(inner[0], merged_from=[{k: m[k] for k in ("date", "commit", "command")}
                                         for m in inner[0]["merged_from"]])
    assert merge_results([run("c", short), (legacy, [])])[0]["timing"] == outer_meta["timing"]
    median = merge_results([run("a", long), run("b", short)], median=True)[0]
    legacy["timing"] = median["timing"]  # (the median note is the merge's, not a run's)
    assert merge_results([run("c", short), (legacy, [])])[0]["timing"] == outer_meta["timing"]
    legacy["timing"] = "runs 1: x"  # names one of its two runs: each run keeps the line
    assert merge_results([(legacy, [])])[0]["timing"] == "runs 1: x"


def _case(times: dict[str, float | str], flops: float = 4e12) -> CaseResult:
    impls = [ImplResult(n, OK, t, flops / (t * 1e-3) / 1e12, 1e-3, 1e-2) if isinstance(t, float)
             else ImplResult(n, t, reason=f"{n} {t}") for n, t in times.items()]
    return CaseResult("causal", "tiny", 64, 2, 4, 4, 16, 1000, 0.5, "band", flops,
                      "float64", impls=impls)


def test_repeated_runs_merge_into_their_median():
    merged = median_of_repeats([_case({"ours": 1.0, "sdpa": 2.0}),
                                _case({"ours": 3.0, "sdpa": 2.2}),
                                _case({"ours": 1.2, "sdpa": 1.8})])
    assert len(merged) == 1
    ours, sdpa = merged[0].impls
    assert (ours.status, ours.time_ms, sdpa.time_ms) == (OK, 1.2, 2.0)
    assert ours.tflops == pytest.approx(4e12 / 1.2e-3 / 1e12)
    assert "median of 3 runs: 1.000 / 3.000 / 1.200 ms" in ours.note


def test_a_failure_in_any_repeat_is_kept():
    merged = median_of_repeats([_case({"ours": 1.0, "peer": 2.0}),
                                _case({"ours": "wrong", "peer": "oom"}),
                                _case({"ours": 1.1, "peer": "error"})])
    ours, peer = merged[0].impls
    assert ours.status == "wrong" and ours.reason == "run 2 of 3: ours wrong"
    assert peer.status == "error" and peer.reason.startswith("run 3 of 3")


def test_a_failure_names_its_repeat_when_another_repeat_lacks_the_impl():
    merged = median_of_repeats([_case({"ours": 1.0}), _case({"ours": 1.0, "peer": 2.0}),
                                _case({"ours": 1.0, "peer": "wrong"})])
    peer = merged[0].impls[1]
    assert peer.status == "wrong" and peer.reason == "run 3 of 3: peer wrong"
    ok = median_of_repeats([_case({"ours": 1.0}), _case({"ours": 1.0, "peer": 2.0})])
    assert "median of 1 of 2 runs" in ok[0].impls[1].note


def test_repeats_must_count_the_same_work():
    with pytest.raises(ValueError, match="not one case"):
        median_of_repeats([_case({"ours": 1.0}), _case({"ours": 1.0}, flops=5e12)])


def test_the_cli_merges_repeats_by_median_and_says_so(tmp_path):
    paths = []
    for i, t in enumerate((1.0, 1.4, 1.2)):
        folder = tmp_path / f"r{i}"
        write_reports(folder, collect_metadata(f"cubridge bench causal # {i}", "cpu", "t"),
                      [_case({"ours": t})])
        paths.append(str(folder / "results.json"))
    argv = ["bench", "--merge", *paths, "--median", "--out-dir", str(tmp_path), "--name", "m"]
    assert main(argv) == 0
    meta, merged = load_json(tmp_path / "m" / "results.json")
    assert [i.time_ms for i in merged[0].impls] == [1.2]
    assert "median of its runs" in meta["timing"]
    assert main(["bench", "--median", "--out-dir", str(tmp_path)]) == 2


def test_a_spec_of_fp16_alone_is_benchmarked_in_fp16_and_its_rows_say_so(specs):
    """`cubridge run` benchmarks in bf16 where the spec lists it, else in the spec's
    first dtype (its kernel has builds of its DTYPES only: a spec of fp16 alone failed
    in the benchmark with "no build for ... bfloat16"); the report's rows name a dtype
    other than bf16 beside the config."""
    import dataclasses

    import torch

    from cubridge.bench.report import markdown_table
    from cubridge.pipeline.run import bench_dtype

    causal = specs["causal"]
    fp16_only = dataclasses.replace(causal, dtypes=[torch.float16])
    assert bench_dtype(causal) == torch.bfloat16
    assert bench_dtype(fp16_only) == torch.float16
    results = run_bench([fp16_only], peer_impls(["sdpa"]),
                        BenchConfig(seq_lens=(32,), configs=("tiny",), tokens=64, device="cpu",
                                    dtype=torch.float16), wallclock_timer(1),
                        progress=lambda _: None)
    assert results[0].dtype == "fp16" and results[0].impls[0].status == OK
    assert "| causal | tiny (fp16) | 32 |" in markdown_table(results)
