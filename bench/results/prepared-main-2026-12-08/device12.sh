#!/usr/bin/env bash
# Device calls for main (2026-12-08). AB9=1 runs the three A/Bs (ab9 cheap-selects, ab11 Longformer
# rows, ab12 odd periods). FA80RUNS=1 runs dit_xl, phi3_mini and gemma2_global through `cubridge run
# --kernel fa_sm80 --no-bench` (fa_sm80's head dims 72, 96, 256 verified through the pipeline).
# Call A (carry .peers/fa4.aa, .ab/wheels, .ab/pre, .ab/specs,
# .ab/device12.sh): TESTS=1 bash .ab/device12.sh  -> GPU test groups on main + fa4.aa parked in /tmp/peers.
# Call B/C (carry .peers/fa4.ab, .ab/...): bash .ab/device12.sh SPEC...  -> FA4 extracted, peer tests,
# each spec through `cubridge run` against every peer while LIMIT seconds last.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res12; mkdir -p $R/specs
[ -f .peers/fa4.aa ] && mkdir -p /tmp/peers && cp .peers/fa4.aa /tmp/peers/
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
echo "$(date -u) call start $*" >> $R/summary.txt
if [ -n "${AB9:-}" ]; then  # cheap-selects: tables (the old form) against computed selects
  mkdir -p /tmp/abc $R/ab9 && tar -C /tmp/abc -xJf .ab/ab9/ab9.tar.xz
  A=.ab/specs/ab
  CUBRIDGE_CACHE_DIR=/tmp/abc timeout 200 python bench/kernels/fa_sm90/variant_ab.py \
    $A/sign_direction_bias.py $A/clamp_max_distance_penalty.py $A/piecewise_distance_bias.py \
    --header tables=.ab/ab9/tables --header direct=.ab/ab9/direct \
    --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 --out $R/ab9 > $R/ab9/log.txt 2>&1
  echo "ab9 rc=$?" >> $R/summary.txt
  python bench/kernels/fa_sm90/ab_table.py $R/ab9/results.json --medians > $R/ab9/ab.md 2>&1
  mkdir -p $R/ab11 && tar -C /tmp/abc -xJf .ab/ab11/ab11.tar.xz  # row-only-terms: Longformer
  CUBRIDGE_CACHE_DIR=/tmp/abc timeout 150 python bench/kernels/fa_sm90/variant_ab.py \
    .ab/specs/ab/longformer.py --header main=.ab/ab11/main --header rows=.ab/ab11/rows \
    --seq-lens 4096 --configs longformer_base,llama2_7b --rounds 2 --out $R/ab11 > $R/ab11/log.txt 2>&1
  echo "ab11 rc=$?" >> $R/summary.txt
  python bench/kernels/fa_sm90/ab_table.py $R/ab11/results.json --medians > $R/ab11/ab.md 2>&1
  mkdir -p $R/ab12 && tar -C /tmp/abc -xJf .ab/ab12/ab12.tar.xz  # odd-periods: key sets of period 3 and 24
  CUBRIDGE_CACHE_DIR=/tmp/abc timeout 150 python bench/kernels/fa_sm90/variant_ab.py \
    $A/fmod_signed_period.py $A/dilated_every_third.py --header main=.ab/ab12/main \
    --header keysets=.ab/ab12/keysets --seq-lens 4096 --configs llama2_7b,qwen25_72b --rounds 2 \
    --out $R/ab12 > $R/ab12/log.txt 2>&1
  echo "ab12 rc=$?" >> $R/summary.txt
  python bench/kernels/fa_sm90/ab_table.py $R/ab12/results.json --medians > $R/ab12/ab.md 2>&1
fi
if [ -n "${TESTS:-}" ]; then
  mkdir -p $R/tests
  OUT=$R/tests CUBRIDGE_COMMIT=${COMMIT:-main} GROUP_TIMEOUT_S=${TLIM:-450} CUBRIDGE_CACHE_DIR=/tmp/testcache \
    bash bench/device_gpu_tests.sh \
    variants='tests/lower/test_hooks_gpu.py -k "test_test_variants"' \
    hooks90='tests/lower/test_hooks_gpu.py -k "generated_hooks_compute and fa_sm90"' \
    fa90='tests/kernels/test_fa_sm90_gpu.py tests/lower/test_trig_accuracy_gpu.py' \
    fa80='tests/kernels/test_fa_sm80_gpu.py tests/kernels/test_library_kernels_gpu.py -k "fa_sm80"' \
    lowered='tests/llm_path/test_lowered_on_gpu.py' >> $R/summary.txt 2>&1
fi
if [ -n "${FA80RUNS:-}" ]; then  # fa_sm80's new head dims through `cubridge run` (verify only)
  mkdir -p $R/fa80runs
  for f in examples/specs/dit_xl.py examples/specs/phi3_mini.py examples/specs/gemma2_global.py; do
    n=$(basename $f .py)
    CUBRIDGE_CACHE_DIR=/tmp/cache12 timeout 200 python -m cubridge.cli run $f --kernel fa_sm80 \
      --no-bench --out /tmp/fa80runs/$n > $R/fa80runs/$n.log 2>&1
    echo "fa80 run $n rc=$?" >> $R/summary.txt
  done
fi
PEERS=sdpa,flex_triton
if [ ! -f /tmp/site/.fa4_ready ] && [ -f /tmp/peers/fa4.aa ] && [ -f .peers/fa4.ab ]; then
  cat /tmp/peers/fa4.aa .peers/fa4.ab | xz -d | (mkdir -p /tmp/site && tar -C /tmp/site -xf -) \
    && touch /tmp/site/.fa4_ready
fi
if [ -f /tmp/site/.fa4_ready ]; then
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
  PEERS=sdpa,flex_triton,flex_flash,fa4
  if [ ! -f $R/peer_tests.txt ] && [ -z "${NO_PEER_TESTS:-}" ]; then
    timeout 200 python -m pytest -q -p no:cacheprovider tests/bench/test_peers_gpu.py \
      -k "generator_lacks or makes_a_tensor" > $R/peer_tests.txt 2>&1
    echo "peer tests rc=$?" >> $R/summary.txt
  fi
fi
export CUBRIDGE_CACHE_DIR=/tmp/cache12
start=$(date +%s)
for f in "$@"; do
  n=$(basename $f .py)
  if [ $(( $(date +%s) - start )) -gt ${LIMIT:-420} ]; then echo "$n skipped (time)" >> $R/summary.txt; continue; fi
  [ -f $R/specs/$n/done ] && continue
  t0=$(date +%s)
  timeout 150 python -m cubridge.cli run $f --seq-lens 4096 --peers $PEERS --out .ab/pre/$n \
    > $R/specs/$n.log 2>&1
  rc=$?; echo "$n rc=$rc $(( $(date +%s) - t0 )) s ($PEERS)" >> $R/summary.txt
  mkdir -p $R/specs/$n; [ $rc -eq 0 ] && touch $R/specs/$n/done; cp .ab/pre/$n/*.md .ab/pre/$n/*.txt .ab/pre/$n/*.json $R/specs/$n/ 2>/dev/null
done
tar czf $OUT/res12.tgz -C /tmp res12; cat $R/summary.txt; tail -3 $R/peer_tests.txt 2>/dev/null
