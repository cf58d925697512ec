set -u
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/tt2.tar.xz
timeout 400 python bench/kernels/fa_sm90/tile_trace.py --out $OUT/trace --variant causal --variant comb_prefix_softcap_sigmoid --variant sliding_window_1024 --per-warp --commit ff944dc > $OUT/trace_log.txt 2>&1
echo rc=$?; tail -3 $OUT/trace_log.txt; cat $OUT/trace/trace.md
