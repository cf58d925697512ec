"""Measurement: timing, FLOP counting on allowed pairs, peer baselines, reports.

`cubridge bench` implements shared/BENCHMARK.md: every implementation gets the
same inputs, its output is checked against a float64 reference before its time
counts, and TFLOP/s are counted on allowed (q, k) pairs only.
"""

from cubridge.bench.flops import MaskStats, count_allowed_pairs
from cubridge.bench.runner import BenchConfig, run_bench

__all__ = ["BenchConfig", "MaskStats", "count_allowed_pairs", "run_bench"]
