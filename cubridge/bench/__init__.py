"""Measurement: timing, FLOP counting on allowed pairs, peer baselines, reports.

`cubridge bench` implements docs/benchmark.md: every implementation gets the
same inputs, its output is checked against a float64 reference before its time
counts, and TFLOP/s are counted on allowed (q, k) pairs only.

Entry points: cubridge.bench.runner.run_bench (the loop), cubridge.bench.peers
(what is compared: the peers of the one registry, cubridge.verify.peers, as
timed implementations), cubridge.bench.flops.count_allowed_pairs (the FLOP
count), cubridge.bench.report (JSON, markdown, PNG).
"""
