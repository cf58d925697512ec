#!/usr/bin/env bash
# Prepared, not run (main, 0742b85 or later): GPU tests of the c_style_ops and
# finfo_min_mask test variants on both kernels, then the sixteen specs of specs/ (copied
# to .ab/specs/u3/) through `cubridge run` at S = 4096: GPU verification, then the
# benchmark against every peer when FA4's first part is in /tmp/peers (an earlier call
# on the same machine; `.peers/fa4.ab` carried), else against SDPA and Flex Triton.
# Specs past LIMIT seconds are left for a later call (summary.txt). PRE: run directories
# prepared on the CPU machine (`cubridge run` there stops after compiling).
set -u
export PYTHONPATH=$PWD
pip install --no-deps --no-build-isolation -q .ab/wheels/*.whl >/dev/null 2>&1
R=/tmp/res8; mkdir -p $R/u3
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
CUBRIDGE_CACHE_DIR=/tmp/testcache timeout 150 python -m pytest -q -p no:cacheprovider \
  tests/lower/test_hooks_gpu.py -k "test_test_variants and (c_style_ops or finfo_min_mask)" \
  > $R/gpu_tests.txt 2>&1
echo "gpu tests rc=$?" >> $R/summary.txt
PEERS=sdpa,flex_triton
if [ -f /tmp/peers/fa4.aa ] && [ -f .peers/fa4.ab ]; then
  cat /tmp/peers/fa4.aa .peers/fa4.ab | xz -d | (mkdir -p /tmp/site && tar -C /tmp/site -xf -)
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PYTHONPATH
  PEERS=sdpa,flex_triton,flex_flash,fa4
fi
export CUBRIDGE_CACHE_DIR=/tmp/cache8
PRE=${PRE:-.ab/pre8}  # run directories built on the CPU machine (cubins reused)
start=$(date +%s)
for f in ${@:-.ab/specs/u3/*.py}; do
  n=$(basename $f .py)
  if [ $(( $(date +%s) - start )) -gt ${LIMIT:-420} ]; then echo "$n skipped (time)" >> $R/summary.txt; continue; fi
  t0=$(date +%s)
  timeout 150 python -m cubridge.cli run $f --seq-lens 4096 --peers $PEERS --out $PRE/$n \
    > $R/u3/$n.log 2>&1
  echo "$n rc=$? $(( $(date +%s) - t0 )) s" >> $R/summary.txt
  mkdir -p $R/u3/$n && cp $PRE/$n/*.md $PRE/$n/*.txt $PRE/$n/*.json $R/u3/$n/ 2>/dev/null
done
tar czf $OUT/res8.tgz -C /tmp res8; cat $R/summary.txt; tail -3 $R/gpu_tests.txt
