#!/usr/bin/env bash
# One device call: an A/B through variant_ab.py (every output verified before timing).
set -o pipefail
export PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache PYTHONUNBUFFERED=1 CUBRIDGE_COMMIT=${1:?commit}
shift
{ nvidia-smi -L; nvcc --version | tail -2; date -u; } > $OUT/ab.log 2>&1
t0=$(date +%s)
timeout ${AB_S:-200} python bench/kernels/fa_sm90/variant_ab.py "$@" --out $OUT/ab >> $OUT/ab.log 2>&1
echo "ab rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
tail -3 $OUT/ab.log
