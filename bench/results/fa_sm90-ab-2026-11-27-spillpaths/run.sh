# As run (one device call, 2026-11-27), after building every cubin here:
#   src=cubridge/kernels/fa_sm90/fa_sm90.cu; mkdir -p .ab/rp_least .ab/rp_all .ab/rp_sums .ab/rp_rowiv
#   cp $src .ab/rp_all/fa_sm90.cu
#   (printf '#define CUBRIDGE_ROW_INTERVAL_BITS 0\n'; cat $src) > .ab/rp_sums/fa_sm90.cu
#   (printf '#define CUBRIDGE_KEEP_MAX_BY_SUMS 0\n'; cat $src) > .ab/rp_rowiv/fa_sm90.cu
#   PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py \
#       relative_position --header least=.ab/rp_least --header all=.ab/rp_all \
#       --header sums=.ab/rp_sums --header rowiv=.ab/rp_rowiv --compile-only sm_90a
#   (cache stripped of sources and packed: tar -C .abcache -cf - . | xz > .ab/abcache.tar.xz)
mkdir -p .abcache && tar -C .abcache -xJf .ab/abcache.tar.xz && PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache timeout 280 python bench/kernels/fa_sm90/variant_ab.py relative_position --header least=.ab/rp_least --header all=.ab/rp_all --header sums=.ab/rp_sums --header rowiv=.ab/rp_rowiv --seq-lens 2048,4096,8192 --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/rp > $OUT/ab.log 2>&1
