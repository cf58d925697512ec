set -u
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/vwarp.tar.xz
mkdir -p $OUT/ab
timeout 330 python bench/kernels/fa_sm90/variant_ab.py full causal sliding_window_1024 global_sliding_window document_causal prefix_lm sigmoid_causal comb_prefix_softcap_sigmoid \
  --header head=.ab/head_src --header vwarp=.ab/empty \
  --seq-lens 2048,8192 --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/ab > $OUT/ab/log.txt 2>&1
echo rc=$?
python bench/kernels/fa_sm90/ab_table.py $OUT/ab/results.json --medians > $OUT/ab/ab.md 2>&1
cat $OUT/ab/ab.md
GROUP_TIMEOUT_S=230 CUBRIDGE_COMMIT=wip-vwarp OUT=$OUT bash bench/device_gpu_tests.sh \
  kernels='tests/kernels/test_fa_sm90_gpu.py tests/kernels/test_library_kernels_gpu.py -k "fa_sm90 or fixed_max or soft_cap or kept"' \
  hooks='tests/lower/test_hooks_gpu.py -k "fa_sm90"'
for f in $OUT/gpu_*; do echo $f; tail -2 $f; done
