#!/usr/bin/env bash
# One device call: the early-open A/B (every output verified before timing), then fa_sm90's GPU tests.
set -o pipefail
export PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache PYTHONUNBUFFERED=1 CUBRIDGE_COMMIT=${1:?commit}
{ nvidia-smi -L; nvcc --version | tail -2; date -u; } > $OUT/ab.log 2>&1
t0=$(date +%s)
timeout ${AB_S:-130} python bench/kernels/fa_sm90/variant_ab.py document_causal share_question global_sliding_window \
  sliding_window_1024 prefix_lm causal --header old=.ab/old --header new=.ab/new \
  --seq-lens 4096,1024 --rounds 2 --out $OUT/ab >> $OUT/ab.log 2>&1
echo "ab rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
t0=$(date +%s)
timeout ${TESTS_S:-80} python -m pytest -m gpu -q -p no:cacheprovider -x tests/kernels/test_fa_sm90_gpu.py \
  tests/kernels/test_library_kernels_gpu.py -k fa_sm90 > $OUT/gpu_tests.txt 2>&1
echo "gpu tests rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/gpu_tests.txt
tail -3 $OUT/ab.log; tail -3 $OUT/gpu_tests.txt
