#!/usr/bin/env bash
# Prepared, not run (branch key-set-ranges): GPU tests of the key-set test variants
# (sparse_fixed, residue_ranges: ranges of residues and floor-quotient bounds; the
# earlier residue_keys, strided_heads; dilated_sliding_window at every fa_sm90 head dim),
# then the A/B: main (headers and fa_sm90.cu of main at e337627, .ab/main5) against the
# branch (.ab/new5 empty: today's), S = 4096, both configs, two interleaved rounds, every
# output verified before it is timed. Prepare on the CPU machine (README).
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res5; mkdir -p $R/ab .ab/new5
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
export CUBRIDGE_CACHE_DIR=/tmp/testcache
timeout 240 python -m pytest -q -p no:cacheprovider tests/lower/test_hooks_gpu.py -k \
  "(test_test_variants and (sparse_fixed or residue_ranges or residue_keys or strided_heads)) or dilated_sliding_window" \
  > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
mkdir -p /tmp/abc5 && tar -C /tmp/abc5 -xJf .ab/ab5.tar.xz
CUBRIDGE_CACHE_DIR=/tmp/abc5 timeout 280 python bench/kernels/fa_sm90/variant_ab.py \
  $(cat .ab/specs/ab5_variants.txt) --header main=.ab/main5 --header ranges=.ab/new5 \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab > $R/ab/log.txt 2>&1
echo "ab rc=$?" >> $R/summary.txt
python bench/kernels/fa_sm90/ab_table.py $R/ab/results.json --medians > $R/ab/ab.md 2>&1
tar czf $OUT/res5.tgz -C /tmp res5; cat $R/summary.txt; tail -4 $R/gpu_tests.txt; cat $R/ab/ab.md
