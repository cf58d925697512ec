# As run on the device (one call): the A/B, then the GPU tests with the candidate in place.
mkdir -p .abcache && tar -C .abcache -xJf .ab/abcache.tar.xz
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache timeout 300 python bench/kernels/fa_sm90/variant_ab.py \
    full causal document_causal sliding_window_1024 global_sliding_window share_question softcap_causal \
    --header base=.ab/epibase --header stsm=.ab/stsm --seq-lens 1024,2048,4096 \
    --configs llama2_7b,qwen25_72b --rounds 2 --out $OUT/ab > $OUT/ab.log 2>&1
tail -3 $OUT/ab.log
python -m pip install -q --no-deps .ab/wheels/*.whl > /dev/null 2>&1
cp .ab/stsm/fa_sm90.cu cubridge/kernels/fa_sm90/fa_sm90.cu
GROUP_TIMEOUT_S=280 CUBRIDGE_COMMIT=stsm-candidate OUT=$OUT bash bench/device_gpu_tests.sh \
    kernels='tests/kernels/test_fa_sm90_gpu.py tests/kernels/test_library_kernels_gpu.py -k fa_sm90' \
    hooks='tests/lower/test_hooks_gpu.py -k "fa_sm90 or key_run"' \
    llm='tests/llm_path/test_lowered_on_gpu.py -k fa_sm90' 2>&1 | tail -4
