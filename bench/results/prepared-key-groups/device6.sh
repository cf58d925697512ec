#!/usr/bin/env bash
# Prepared, not run (branch key-groups): GPU tests of the random_blocks test variant
# (BigBird on 32-key blocks, a random-block table: key groups) and tree_mask on both
# kernels, then the A/B of BigBird (.ab/specs/bigbird.py) with key groups on (.ab/kgon
# empty: today's source) and off (.ab/kgoff: fa_sm90.cu with CUBRIDGE_KEY_GROUP_BITS 0,
# which spills and takes the spill fallback, as main does), S = 1024 and 4096, both
# configs, two interleaved rounds, every output verified before it is timed.
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res6; mkdir -p $R/ab .ab/kgon
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
export CUBRIDGE_CACHE_DIR=/tmp/testcache
timeout 200 python -m pytest -q -p no:cacheprovider tests/lower/test_hooks_gpu.py \
  -k "test_test_variants and (random_blocks or tree_mask)" > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
mkdir -p /tmp/abc6 && tar -C /tmp/abc6 -xJf .ab/ab6.tar.xz
CUBRIDGE_CACHE_DIR=/tmp/abc6 timeout 240 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/bigbird.py --header on=.ab/kgon --header off=.ab/kgoff --seq-lens 1024,4096 \
  --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab > $R/ab/log.txt 2>&1
echo "ab rc=$?" >> $R/summary.txt
python bench/kernels/fa_sm90/ab_table.py $R/ab/results.json --medians > $R/ab/ab.md 2>&1
tar czf $OUT/res6.tgz -C /tmp res6; cat $R/summary.txt; tail -4 $R/gpu_tests.txt; cat $R/ab/ab.md
