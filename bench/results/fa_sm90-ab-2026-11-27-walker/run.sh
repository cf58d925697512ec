#!/usr/bin/env bash
# One device call: the walker warp (warp 1 of the producer warpgroup claims the next
# tile, issues its Q and walks its first key blocks while the producer loads this
# tile's last K and V; the walk's state in shared memory) against the kernel before
# it, every output verified before timing; then fa_sm90's GPU tests.
set -o pipefail
export PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache PYTHONUNBUFFERED=1 CUBRIDGE_COMMIT=${1:?commit}
{ nvidia-smi -L; nvcc --version | tail -2; date -u; } > $OUT/ab.log 2>&1
# a hang shows here first (a minute), not after the whole A/B
timeout 60 python bench/kernels/fa_sm90/variant_ab.py document_causal causal --header new=.ab/new \
  --seq-lens 2048 --rounds 1 --out $OUT/sanity >> $OUT/ab.log 2>&1 || { echo "sanity rc=$?"; tail -5 $OUT/ab.log; exit 1; }
t0=$(date +%s)
timeout 200 python bench/kernels/fa_sm90/variant_ab.py causal full document_causal share_question \
  sliding_window_1024 --header old=.ab/old --header new=.ab/new --seq-lens 4096,2048,8192 --rounds 3 --out $OUT/ab >> $OUT/ab.log 2>&1
echo "ab rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
GROUP_TIMEOUT_S=240 OUT=$OUT bash bench/device_gpu_tests.sh \
  kernels='tests/kernels/test_fa_sm90_gpu.py tests/kernels/test_library_kernels_gpu.py -k fa_sm90' \
  hooks='tests/lower/test_hooks_gpu.py -k fa_sm90' >> $OUT/ab.log 2>&1
for f in $OUT/ab.log $OUT/gpu_*.txt; do tail -n 3 $f; done
