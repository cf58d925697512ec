set -u
python -m pip install -q --no-deps .ab/wheels/*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/sm80b.tar.xz
mkdir -p $OUT/ab
timeout 150 python bench/kernels/fa_sm90/variant_ab.py causal_blockwise causal --kernel fa_sm80 \
  --header head=.ab/sm80_head --header key_terms=.ab/empty --seq-lens 2048,4096 \
  --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/ab > $OUT/ab/log.txt 2>&1
echo "ab rc=$?"
python bench/kernels/fa_sm90/ab_table.py $OUT/ab/results.json --medians > $OUT/ab/ab.md 2>&1
cat $OUT/ab/ab.md
GROUP_TIMEOUT_S=${GT:-360} CUBRIDGE_COMMIT=$C OUT=$OUT bash bench/device_gpu_tests.sh \
  corpus='tests/corpus/test_attn_gym_corpus_gpu.py' k80='tests/kernels/test_fa_sm80_gpu.py' \
  h80='tests/lower/test_hooks_gpu.py -k "fa_sm80 and test_generated"' \
  b80='tests/lower/test_hooks_gpu.py -k "fa_sm80 and not test_generated" tests/kernels/test_library_kernels_gpu.py'
for f in $OUT/gpu_*.txt; do echo "== $f"; tail -n 3 $f; done
