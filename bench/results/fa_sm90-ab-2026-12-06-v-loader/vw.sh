set -u
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/vwarp.tar.xz
mkdir -p $OUT/ab
V=$(python -c "from cubridge.bench.commands import BENCHMARK_VARIANTS as B; print(' '.join(B))")
timeout 540 python bench/kernels/fa_sm90/variant_ab.py $V \
  --header head=.ab/head_src --header vwarp=.ab/empty \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/ab > $OUT/ab/log.txt 2>&1
echo rc=$?
tail -3 $OUT/ab/log.txt
python bench/kernels/fa_sm90/ab_table.py $OUT/ab/results.json --medians > $OUT/ab/ab.md 2>&1
cat $OUT/ab/ab.md
