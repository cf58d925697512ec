#!/usr/bin/env bash
# One device call: the A/B of a distance bias evaluated once per distance (every output verified before
# timing), then the GPU tests the change touches, three groups side by side.
set -o pipefail
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass-*.whl > /dev/null 2>&1
export PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache PYTHONUNBUFFERED=1 CUBRIDGE_COMMIT=${1:?commit}
{ nvidia-smi -L; nvcc --version | tail -2; date -u; } > $OUT/ab.log 2>&1
t0=$(date +%s)
timeout 200 python bench/kernels/fa_sm90/variant_ab.py relative_position alibi_causal causal \
  --header old=.ab/old --header new=.ab/new \
  --seq-lens 4096,2048,8192 --rounds 3 --out $OUT/ab >> $OUT/ab.log 2>&1
echo "ab rc=$? in $(( $(date +%s) - t0 )) s" >> $OUT/ab.log
GROUP_TIMEOUT_S=300 OUT=$OUT bash bench/device_gpu_tests.sh \
  kernels='tests/kernels/test_fa_sm90_gpu.py tests/kernels/test_library_kernels_gpu.py -k fa_sm90' \
  hooks='tests/lower/test_hooks_gpu.py -k fa_sm90' \
  llm='tests/llm_path/test_lowered_on_gpu.py -k fa_sm90' >> $OUT/ab.log 2>&1
for f in $OUT/ab.log $OUT/gpu_*.txt; do tail -n 3 $f; done
