# The device call of the A/B (run from the repo root, `.ab/` carried). Prepared on the CPU:
#   git apply distance_pairs_full.patch; .ab/head_src/fa_sm90.cu = 2628f8d's source; .ab/head_fb/fa_sm90.cu = it
#   with "#define CUBRIDGE_KEEP_MAX_BY_SUMS 0" prepended; .ab/dp_nofb/fa_sm90.cu = the patched source; .ab/empty empty;
#   CUBRIDGE_CACHE_DIR=/tmp/ab-cache PYTHONPATH=. python bench/kernels/fa_sm90/variant_ab.py relative_position \
#     t5_relative_bias causal --header head=.ab/head_src --header head_fb=.ab/head_fb --header dp=.ab/empty \
#     --header dp_nofb=.ab/dp_nofb --compile-only sm_90a --pack .ab/dp.tar.xz
set -u
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/dp.tar.xz
mkdir -p $OUT/ab
python bench/kernels/fa_sm90/variant_ab.py relative_position t5_relative_bias causal \
  --header head=.ab/head_src --header head_fb=.ab/head_fb --header dp=.ab/empty --header dp_nofb=.ab/dp_nofb \
  --seq-lens 2048,4096 --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/ab > $OUT/ab/log.txt 2>&1
echo rc=$?
tail -5 $OUT/ab/log.txt
python bench/kernels/fa_sm90/ab_table.py $OUT/ab/results.json --medians > $OUT/ab/ab.md 2>&1
cat $OUT/ab/ab.md
