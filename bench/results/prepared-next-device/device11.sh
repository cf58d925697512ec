#!/usr/bin/env bash
# Prepared, not run (branch next-device: cheap-selects + row-only-terms + floor-masks +
# odd-periods + flash-numbers). Call A (carrying .peers/fa4.aa, .ab/wheels, .ab/specs,
# .ab/dev11): `mkdir -p /tmp/peers && cp .peers/fa4.aa /tmp/peers/ && bash
# .ab/specs/device11.sh` runs the GPU tests and the three A/Bs. Call B on the same machine
# (carrying .ab/wheels, .ab/specs, .ab/pre11, .peers/fa4.ab): `SPECS_ONLY=1 bash
# .ab/specs/device11.sh SPEC...` runs the peers' GPU test (FA4 complete then) and each spec
# through `cubridge run` against every peer while LIMIT seconds last. Call C on the same
# machine (carrying .ab/wheels, .ab/specs, .ab/pre12): `SPECS_ONLY=1 PRE=.ab/pre12 bash
# .ab/specs/device11.sh .ab/specs/u6/*.py .ab/specs/u7/*.py .ab/specs/u8/*.py` (FA4 stays in /tmp/site).
# GPU tests: the test variants c_style_ops, longformer_globals, finfo_min_*, odd_periods
# kitchen_sink and trig_terms on both kernels. A/Bs at S = 4096, two interleaved rounds, every output
# verified before it is timed: (9) selects of the distance tabulated (main's form,
# options.json {"table_selects": true}) against computed per score; (11) longformer,
# main's header (mask_mod per pair) against two row intervals; (12) fmod_signed_period
# and dilated_every_third, main's headers (mask_mod per pair) against key sets of
# period 3. Results under /tmp/res11, packed into $OUT/res11.tgz.
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res11; mkdir -p $R/ab9 $R/ab11 $R/ab12 $R/specs
mkdir -p .ab/dev11/new9 .ab/dev11/new11 .ab/dev11/new12
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
git log -1 --format='%H %s' > $R/tree.txt 2>/dev/null
if [ -z "${SPECS_ONLY:-}" ]; then
CUBRIDGE_CACHE_DIR=/tmp/testcache timeout 300 python -m pytest -q -p no:cacheprovider \
  tests/lower/test_hooks_gpu.py -k "test_test_variants and (c_style_ops or longformer_globals or finfo_min or odd_periods or kitchen_sink or trig_terms)" \
  > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
mkdir -p /tmp/abc && for a in ab9 ab11 ab12; do tar -C /tmp/abc -xJf .ab/dev11/$a.tar.xz; done
CUBRIDGE_CACHE_DIR=/tmp/abc timeout 200 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/u3/sign_direction_bias.py .ab/specs/u3/clamp_max_distance_penalty.py \
  .ab/specs/piecewise_distance_bias.py --header tables=.ab/dev11/sel9 --header direct=.ab/dev11/new9 \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab9 > $R/ab9/log.txt 2>&1
echo "ab9 rc=$?" >> $R/summary.txt
CUBRIDGE_CACHE_DIR=/tmp/abc timeout 120 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/longformer.py --header main=.ab/dev11/main11 --header rows=.ab/dev11/new11 \
  --seq-lens 4096 --configs longformer_base,llama2_7b --rounds 2 --out $R/ab11 > $R/ab11/log.txt 2>&1
echo "ab11 rc=$?" >> $R/summary.txt
CUBRIDGE_CACHE_DIR=/tmp/abc timeout 120 python bench/kernels/fa_sm90/variant_ab.py \
  .ab/specs/u5/fmod_signed_period.py .ab/specs/u5/dilated_every_third.py \
  --header main=.ab/dev11/main12 --header keysets=.ab/dev11/new12 \
  --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab12 > $R/ab12/log.txt 2>&1
echo "ab12 rc=$?" >> $R/summary.txt
for a in ab9 ab11 ab12; do
  python bench/kernels/fa_sm90/ab_table.py $R/$a/results.json --medians > $R/$a/ab.md 2>&1
done
fi
PEERS=sdpa,flex_triton
if [ ! -f /tmp/site/.fa4_ready ] && [ -f /tmp/peers/fa4.aa ] && [ -f .peers/fa4.ab ]; then
  cat /tmp/peers/fa4.aa .peers/fa4.ab | xz -d | (mkdir -p /tmp/site && tar -C /tmp/site -xf -) \
    && touch /tmp/site/.fa4_ready
fi
if [ -f /tmp/site/.fa4_ready ]; then  # (a later call on the same machine reuses it)
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
  PEERS=sdpa,flex_triton,flex_flash,fa4
  if [ ! -f $R/peer_tests.txt ]; then
    timeout 240 python -m pytest -q -p no:cacheprovider tests/bench/test_peers_gpu.py \
      -k "tensor_constants or generator_lacks" > $R/peer_tests.txt 2>&1
    echo "peer tests rc=$?" >> $R/summary.txt
  fi
fi
export CUBRIDGE_CACHE_DIR=/tmp/cache11
PRE=${PRE:-.ab/pre11}
start=$(date +%s)
for f in "$@"; do
  n=$(basename $f .py)
  if [ $(( $(date +%s) - start )) -gt ${LIMIT:-300} ]; then echo "$n skipped (time)" >> $R/summary.txt; continue; fi
  t0=$(date +%s)
  timeout 150 python -m cubridge.cli run $f --seq-lens 4096 --peers $PEERS --out $PRE/$n \
    > $R/specs/$n.log 2>&1
  echo "$n rc=$? $(( $(date +%s) - t0 )) s" >> $R/summary.txt
  mkdir -p $R/specs/$n && cp $PRE/$n/*.md $PRE/$n/*.txt $PRE/$n/*.json $R/specs/$n/ 2>/dev/null
done
tar czf $OUT/res11.tgz -C /tmp res11; cat $R/summary.txt; tail -3 $R/gpu_tests.txt 2>/dev/null
cat $R/ab9/ab.md $R/ab11/ab.md $R/ab12/ab.md 2>/dev/null
