#!/usr/bin/env bash
# Prepared, not run (branch cheap-selects): GPU tests of the c_style_ops test variant
# (its sign term is computed per score now, not read from a distance table) on both
# kernels; the A/B of sign_direction_bias, clamp_max_distance_penalty and
# piecewise_distance_bias with their selects tabulated (.ab/sel9: options.json
# {"table_selects": true}, the tables main builds) against computed per score (.ab/new9
# empty), S = 4096, both configs, two interleaved rounds, every output verified; then
# the specs of .ab/specs/u3 given as arguments through `cubridge run` against every peer
# when FA4's first part is in /tmp/peers (an earlier call on the same machine) and
# `.peers/fa4.ab` is carried, else against SDPA and Flex Triton, while LIMIT seconds last.
# PRE: run directories built on the CPU machine at the branch.
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res9; mkdir -p $R/ab $R/u3 .ab/new9
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
CUBRIDGE_CACHE_DIR=/tmp/testcache timeout 150 python -m pytest -q -p no:cacheprovider \
  tests/lower/test_hooks_gpu.py -k "test_test_variants and c_style_ops" > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
mkdir -p /tmp/abc9 && tar -C /tmp/abc9 -xJf .ab/ab9.tar.xz
CUBRIDGE_CACHE_DIR=/tmp/abc9 timeout 200 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/u3/sign_direction_bias.py .ab/specs/u3/clamp_max_distance_penalty.py \
  .ab/specs/piecewise_distance_bias.py --header tables=.ab/sel9 --header direct=.ab/new9 \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab > $R/ab/log.txt 2>&1
echo "ab rc=$?" >> $R/summary.txt
python bench/kernels/fa_sm90/ab_table.py $R/ab/results.json --medians > $R/ab/ab.md 2>&1
PEERS=sdpa,flex_triton
if [ -f /tmp/peers/fa4.aa ] && [ -f .peers/fa4.ab ]; then
  cat /tmp/peers/fa4.aa .peers/fa4.ab | xz -d | (mkdir -p /tmp/site && tar -C /tmp/site -xf -)
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
  PEERS=sdpa,flex_triton,flex_flash,fa4
fi
export CUBRIDGE_CACHE_DIR=/tmp/cache9
PRE=${PRE:-.ab/pre10}
start=$(date +%s)
for f in "$@"; do
  n=$(basename $f .py)
  if [ $(( $(date +%s) - start )) -gt ${LIMIT:-300} ]; then echo "$n skipped (time)" >> $R/summary.txt; continue; fi
  t0=$(date +%s)
  timeout 150 python -m cubridge.cli run $f --seq-lens 4096 --peers $PEERS --out $PRE/$n \
    > $R/u3/$n.log 2>&1
  echo "$n rc=$? $(( $(date +%s) - t0 )) s" >> $R/summary.txt
  mkdir -p $R/u3/$n && cp $PRE/$n/*.md $PRE/$n/*.txt $PRE/$n/*.json $R/u3/$n/ 2>/dev/null
done
tar czf $OUT/res9.tgz -C /tmp res9; cat $R/summary.txt; tail -3 $R/gpu_tests.txt; cat $R/ab/ab.md
