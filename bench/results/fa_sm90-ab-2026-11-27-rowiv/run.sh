#!/usr/bin/env bash
# One device call: the row-interval A/B (every output verified before timing), then the
# GPU tests the change touches.
set -o pipefail
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass-*.whl > /dev/null 2>&1
export PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache PYTHONUNBUFFERED=1 CUBRIDGE_COMMIT=${1:?commit}
{ nvidia-smi -L; nvcc --version | tail -2; date -u; } > $OUT/ab.log 2>&1
t0=$(date +%s)
timeout 150 python bench/kernels/fa_sm90/variant_ab.py sliding_window_1024 causal alibi_causal \
  softcap_causal global_sliding_window --header old=.ab/old --header new=.ab/new \
  --seq-lens 4096,2048,8192 --rounds 3 --out $OUT/ab >> $OUT/ab.log 2>&1
echo "ab rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
t0=$(date +%s)
timeout 140 python -m pytest -m gpu -q -p no:cacheprovider tests/kernels/test_fa_sm90_gpu.py \
  tests/kernels/test_library_kernels_gpu.py -k fa_sm90 > $OUT/gpu_tests_kernels.txt 2>&1
echo "rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/gpu_tests_kernels.txt
t0=$(date +%s)
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/lower/test_hooks_gpu.py -k fa_sm90 \
  > $OUT/gpu_tests_hooks.txt 2>&1
echo "rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/gpu_tests_hooks.txt
t0=$(date +%s)
timeout 200 python -m pytest -m gpu -q -p no:cacheprovider tests/llm_path/test_lowered_on_gpu.py \
  -k fa_sm90 > $OUT/gpu_tests_llm_cosine.txt 2>&1
echo "rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/gpu_tests_llm_cosine.txt
for f in $OUT/ab.log $OUT/gpu_tests_*.txt; do tail -n 2 $f; done
