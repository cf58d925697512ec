#!/usr/bin/env bash
# One device call: unmasked blocks of masked variants taken through the masked
# instantiation (CUBRIDGE_MASK_EVERY_BLOCK=1: one steady-step body fewer), against the
# kernel as it stands; every output verified before timing.
set -o pipefail
export PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache PYTHONUNBUFFERED=1 CUBRIDGE_COMMIT=${1:?commit}
{ nvidia-smi -L; nvcc --version | tail -2; date -u; } > $OUT/ab.log 2>&1
t0=$(date +%s)
timeout 300 python bench/kernels/fa_sm90/variant_ab.py sliding_window_1024 global_sliding_window \
  causal document_causal --header old=.ab/old --header new=.ab/new \
  --seq-lens 4096,2048,8192 --rounds 3 --out $OUT/ab >> $OUT/ab.log 2>&1
echo "ab rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
tail -n 3 $OUT/ab.log
