"""What one sandboxed program check costs: a library CuIR program described in
the sandbox (the LLM path's `describe_target` job), forked from a warm server
against spawned afresh.

    python bench/llm/sandbox_latency.py [--jobs 8] [--kernel fa_sm90]

Prints a markdown table of each job's wall time (the server's start counted in
the first forked job, as a run pays it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from cubridge.kernels import get_kernel
from cubridge.llm import SandboxLimits, run_generated


def _one_job(source: str, ir_class: str) -> float:
    start = time.perf_counter()
    run_generated(source, filename="target_cuir.py",
                  entry="cubridge.llm_path.ir_check:describe_program", args=(ir_class,),
                  limits=SandboxLimits(timeout_s=120, threads=2))
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--kernel", default="fa_sm90")
    args = parser.parse_args()
    kernel = get_kernel(args.kernel)
    source = kernel.cuir_path.read_text()
    rows = []
    for mode, flag in (("spawned", "0"), ("forked", "1")):
        os.environ["CUBRIDGE_SANDBOX_FORK"] = flag
        times = [_one_job(source, kernel.ir_class) for _ in range(args.jobs)]
        rows.append((mode, times))
    print(f"{args.jobs} jobs each way, describe_program of {args.kernel}'s CuIR, "
          f"{os.cpu_count()} CPUs\n")
    print("| sandbox process | first job (s) | median of the rest (s) | all jobs (s) |")
    print("|---|---|---|---|")
    for mode, times in rows:
        print(f"| {mode} | {times[0]:.2f} | {statistics.median(times[1:]):.3f} | "
              f"{sum(times):.1f} |")


if __name__ == "__main__":
    main()
