#!/usr/bin/env bash
# Prepared, not run (branch row-choices): GPU tests of the prompt_then_frames test variant
# (a causal prompt, then 64-token frames: three conjunctions, a choice by the row) and of
# c_style_ops (an abs() window) on both kernels, then the A/B of video_frames_text,
# alibi_band and local_band with main's headers (.ab/main7: mask_mod per pair) against
# the branch's (.ab/new7 empty: row intervals), S = 4096, both configs, two interleaved
# rounds, every output verified before it is timed. If FA4's first part is in /tmp/peers (an earlier call on the same machine), the
# spec then runs through `cubridge run` against every peer.
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res7; mkdir -p $R/ab .ab/new7
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
export CUBRIDGE_CACHE_DIR=/tmp/testcache
timeout 200 python -m pytest -q -p no:cacheprovider tests/lower/test_hooks_gpu.py \
  -k "test_test_variants and (prompt_then_frames or c_style_ops or window_per_head)" > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
mkdir -p /tmp/abc7 && tar -C /tmp/abc7 -xJf .ab/ab7.tar.xz
CUBRIDGE_CACHE_DIR=/tmp/abc7 timeout 200 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/video_frames_text.py examples/specs/alibi_band.py examples/specs/local_band.py \
  --header main=.ab/main7 --header choices=.ab/new7 \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab > $R/ab/log.txt 2>&1
echo "ab rc=$?" >> $R/summary.txt
python bench/kernels/fa_sm90/ab_table.py $R/ab/results.json --medians > $R/ab/ab.md 2>&1
if [ -f /tmp/peers/fa4.aa ] && [ -f .peers/fa4.ab ]; then
  PRE=/tmp/pre7 RES=res7p LIMIT=150 bash .ab/specs/device2.sh video_frames_text
  cp -r /tmp/res7p $R/peers 2>/dev/null
fi
tar czf $OUT/res7.tgz -C /tmp res7; cat $R/summary.txt; tail -4 $R/gpu_tests.txt; cat $R/ab/ab.md
