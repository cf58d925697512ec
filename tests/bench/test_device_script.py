"""bench/device_variants.sh all: the whole variants-against-peers comparison in
pieces that each fit one device call, resumable, S = 4096 first, merged at the
end. The cubridge CLI is replaced by a stand-in that records its arguments and
writes what the real one would (a results.json per bench piece)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_CUB = r"""#!/usr/bin/env bash
echo "$*" >> "$CALLS"
[ "$1" = run ] && exit 0
if [ "$2" = --merge ]; then
  out=${@: -1}; name=${@: -3:1}; mkdir -p "$out/$name"; echo merged > "$out/$name/summary.md"
  exit 0
fi
args=("$@"); for i in "${!args[@]}"; do
  [ "${args[$i]}" = --name ] && name=${args[$((i+1))]}
  [ "${args[$i]}" = --out-dir ] && out=${args[$((i+1))]}
done
[ -n "${FAIL_PIECE:-}" ] && [ "$name" = "$FAIL_PIECE" ] && exit 1
sleep "${PIECE_S:-0}"; mkdir -p "$out/$name"; echo '{}' > "$out/$name/results.json"
"""


@pytest.fixture
def tree(tmp_path):
    """A copy of what the script reads (itself, examples/specs), a fake CLI."""
    (tmp_path / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "device_variants.sh", tmp_path / "bench")
    fake = tmp_path / "fake_cub"
    fake.write_text(FAKE_CUB)
    fake.chmod(0o755)
    return tmp_path


def run_all(tree: Path, **env: str) -> tuple[str, list[str]]:
    calls = tree / "calls.txt"
    full = {**os.environ, "OUT": str(tree / "out"), "CUBRIDGE_COMMIT": "abc1234",
            "CUB": str(tree / "fake_cub"), "CALLS": str(calls), "PEERS": "sdpa", **env}
    done = subprocess.run(["bash", "bench/device_variants.sh", "all", "t"], cwd=tree, env=full,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout, calls.read_text().splitlines() if calls.exists() else []


def test_all_runs_then_benches_each_length_and_config_then_merges(tree):
    out, calls = run_all(tree)
    runs = [c for c in calls if c.startswith("run ")]
    assert len(runs) == 14 and all(c.endswith("--no-bench") for c in runs)
    benches = [c for c in calls if c.startswith("bench ") and "--merge" not in c]
    assert [c.split("--name ")[1].split()[0] for c in benches] == [
        "s4096-llama2_7b", "s4096-qwen25_72b", "s8192-llama2_7b", "s8192-qwen25_72b",
        "s2048-llama2_7b", "s2048-qwen25_72b", "s1024-llama2_7b", "s1024-qwen25_72b"]
    first = benches[0]
    assert first.startswith("bench full causal sliding_window_1024") and "--ours runs" in first
    assert "--warmup-ms 25 --rep-ms 100" in first and "--warmup-ms 10 --rep-ms 30" in benches[2]
    assert all("--rounds 1 " in c for c in benches)  # (ROUNDS unset: one timing round)
    merge = [c for c in calls if "--merge" in c]
    assert len(merge) == 1 and merge[0].count("results.json") == 8
    assert "DONE: " in out and "8 pieces" in out
    assert (tree / "out" / "t" / "summary.md").is_file()
    # the call's pieces come back as one archive (the device returns 8 files a call)
    assert not (tree / "out" / "t-parts").exists()
    with tarfile.open(tree / "out" / "t-parts.tar.gz") as parts:
        assert "t-parts/s4096-llama2_7b/results.json" in parts.getnames()
        assert "runs " in parts.extractfile("t-parts/timing.txt").read().decode()


@pytest.mark.slow  # its pieces take a second each
def test_a_call_stops_before_a_piece_that_would_not_fit_and_the_next_resumes(tree):
    out, calls = run_all(tree, BUDGET_S="2", PIECE_S="1", PIECE_ESTIMATE_S="1")
    assert "MORE: " in out and "DONE" not in out
    assert (tree / "out" / "t-parts.tar.gz").is_file()  # what this call finished
    first = [c for c in calls if c.startswith("bench ")]
    assert 1 <= len(first) < 8
    out, calls = run_all(tree, PIECE_S="0")
    assert "DONE: " in out
    benches = [c for c in calls if c.startswith("bench ") and "--merge" not in c]
    assert len(benches) == 8  # the finished pieces were not run again
    assert sum(c.startswith("run ") for c in calls) == 14  # nor the runs


def test_a_failed_piece_is_reported_not_retried_forever(tree):
    out, _ = run_all(tree, FAIL_PIECE="s8192-qwen25_72b")
    assert "s8192-qwen25_72b: FAILED" in out and "FAILED: s8192-qwen25_72b" in out
    out, calls = run_all(tree)
    assert sum("--name s8192-qwen25_72b" in c for c in calls) == 1
    assert "DONE: " in out and "7 pieces" in out


def test_missing_fa4_stops_before_spending_device_time(tree):
    full = {**os.environ, "OUT": str(tree / "out"), "CUBRIDGE_COMMIT": "abc",
            "CUB": str(tree / "fake_cub"), "CALLS": str(tree / "c"),
            "PEERS": "sdpa,fa4", "PYTHONPATH": ""}
    done = subprocess.run(["bash", "bench/device_variants.sh", "all", "t"], cwd=tree, env=full,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "flash-attn-4 does not import" in done.stderr
    assert not (tree / "c").exists()


def test_all_passes_rounds_to_every_bench(tree):
    _, calls = run_all(tree, ROUNDS="3")
    benches = [c for c in calls if c.startswith("bench ") and "--merge" not in c]
    assert len(benches) == 8 and all("--rounds 3 " in c for c in benches)


def test_a_piece_is_expected_to_take_what_pieces_at_its_length_took(tree):
    # S = 4096's pieces (longer timing) took 500 s; one at 8192 took 10 s: the next 8192
    # piece fits a 100 s call, the first at 2048 (no piece of its length yet) does not
    state = tree / "runs" / "_bench-t"
    state.mkdir(parents=True)
    (state / "runs.done").touch()
    (state / "verified.txt").write_text("full\ncausal\n")
    (state / "timing.txt").write_text(
        "runs 100\ns4096-llama2_7b 500\ns4096-qwen25_72b 500\ns8192-llama2_7b 10\n")
    for piece in ("s4096-llama2_7b", "s4096-qwen25_72b", "s8192-llama2_7b"):
        (state / piece).mkdir()
        (state / piece / "results.json").write_text("{}")
    out, calls = run_all(tree, BUDGET_S="100")
    assert [c.split("--name ")[1].split()[0] for c in calls] == ["s8192-qwen25_72b"]
    assert "MORE: " in out and "next piece s2048-llama2_7b needs ~600 s" in out
