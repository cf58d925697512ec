pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl > /dev/null 2>&1
pip install -q --no-deps --no-build-isolation -e . > /dev/null 2>&1
mkdir -p /tmp/cubin-cache && tar -C /tmp/cubin-cache -xJf .ab/cc.tar.xz
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache PYTHONPATH=$PWD
mkdir -p $OUT/t && nvidia-smi > $OUT/gpu.txt
timeout 150 python .ab/q_ab.py $OUT/q_ab.json > $OUT/q_ab.txt 2>&1; echo "ab rc=$?"; cat $OUT/q_ab.txt | tail -18
GROUP_TIMEOUT_S=200 CUBRIDGE_COMMIT=$1 OUT=$OUT/t bash bench/device_gpu_tests.sh \
  lib='tests/kernels/test_library_kernels_gpu.py -k "fa_sm90 and (256 or pairs or 16-192-)"' \
  hooks='tests/lower/test_hooks_gpu.py -k "other_head_dims and not head_dim_96 and (document_causal or sliding_window_1024 or prefix_lm or comb or alibi_causal or softcap_causal)"'
for f in $OUT/t/gpu_*; do echo $f; tail -2 $f; done
tar -C $OUT -czf /tmp/q1.tgz t q_ab.json q_ab.txt gpu.txt && rm -rf $OUT/t && mv /tmp/q1.tgz $OUT/
