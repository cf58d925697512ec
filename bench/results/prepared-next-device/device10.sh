#!/usr/bin/env bash
# Prepared, not run (branch next-device: cheap-selects + row-only-terms + floor-masks).
# GPU tests of the c_style_ops, longformer_globals and finfo_min_* test variants on both
# kernels (the finfo ones: masks lifted from finfo.min, rows with no key filled); two A/Bs at
# S = 4096, both configs, two interleaved rounds, every output verified before it is
# timed: (9) sign_direction_bias, clamp_max_distance_penalty, piecewise_distance_bias
# with selects of the distance tabulated (.ab/dev10/sel9: options.json {"table_selects":
# true}, main's form) against computed per score (.ab/dev10/new9 empty); (11) longformer with
# main's header (.ab/dev10/main11: mask_mod per pair) against the branch's (.ab/dev10/new11 empty:
# two row intervals); then the specs given as arguments through `cubridge run` against
# every peer when FA4's first part is in /tmp/peers (an earlier call on the same
# machine) and `.peers/fa4.ab` is carried, else SDPA and Flex Triton, while LIMIT
# seconds last (SPECS_ONLY=1: only those, in a later call). PRE: run directories built
# on the CPU machine at the branch.
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res10; mkdir -p $R/ab9 $R/ab11 $R/u3 .ab/dev10/new9 .ab/dev10/new11
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
if [ -z "${SPECS_ONLY:-}" ]; then  # (a later call on the same machine: SPECS_ONLY=1)
CUBRIDGE_CACHE_DIR=/tmp/testcache timeout 300 python -m pytest -q -p no:cacheprovider \
  tests/lower/test_hooks_gpu.py -k "test_test_variants and (c_style_ops or longformer_globals or finfo_min)" \
  > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
mkdir -p /tmp/abc && tar -C /tmp/abc -xJf .ab/dev10/ab9.tar.xz && tar -C /tmp/abc -xJf .ab/dev10/ab11.tar.xz
CUBRIDGE_CACHE_DIR=/tmp/abc timeout 200 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/u3/sign_direction_bias.py .ab/specs/u3/clamp_max_distance_penalty.py \
  .ab/specs/piecewise_distance_bias.py --header tables=.ab/dev10/sel9 --header direct=.ab/dev10/new9 \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab9 > $R/ab9/log.txt 2>&1
echo "ab9 rc=$?" >> $R/summary.txt
python bench/kernels/fa_sm90/ab_table.py $R/ab9/results.json --medians > $R/ab9/ab.md 2>&1
CUBRIDGE_CACHE_DIR=/tmp/abc timeout 120 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/longformer.py --header main=.ab/dev10/main11 --header rows=.ab/dev10/new11 \
  --seq-lens 4096 --configs longformer_base,llama2_7b --rounds 2 --out $R/ab11 > $R/ab11/log.txt 2>&1
echo "ab11 rc=$?" >> $R/summary.txt
python bench/kernels/fa_sm90/ab_table.py $R/ab11/results.json --medians > $R/ab11/ab.md 2>&1
fi
PEERS=sdpa,flex_triton
if [ -f /tmp/peers/fa4.aa ] && [ -f .peers/fa4.ab ]; then
  cat /tmp/peers/fa4.aa .peers/fa4.ab | xz -d | (mkdir -p /tmp/site && tar -C /tmp/site -xf -)
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
  PEERS=sdpa,flex_triton,flex_flash,fa4
fi
export CUBRIDGE_CACHE_DIR=/tmp/cache10
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
tar czf $OUT/res10.tgz -C /tmp res10; cat $R/summary.txt; tail -3 $R/gpu_tests.txt 2>/dev/null
cat $R/ab9/ab.md $R/ab11/ab.md 2>/dev/null
