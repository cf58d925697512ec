set -u
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/fixed.tar.xz
mkdir -p $OUT/ab
timeout 420 python bench/kernels/fa_sm90/variant_ab.py softcap_causal causal \
  --header head=.ab/head_src --header fixed=.ab/empty \
  --seq-lens 2048,4096,8192 --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/ab > $OUT/ab/log.txt 2>&1
echo rc=$?
tail -5 $OUT/ab/log.txt
python bench/kernels/fa_sm90/ab_table.py $OUT/ab/results.json --medians > $OUT/ab/ab.md 2>&1
cat $OUT/ab/ab.md
timeout 150 python -m pytest -q -x tests/kernels/test_fa_sm90_gpu.py -k "fixed_max" -p no:cacheprovider > $OUT/t1.txt 2>&1; echo t1 rc=$?; tail -5 $OUT/t1.txt
