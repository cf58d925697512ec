#!/usr/bin/env bash
# GPU test groups run side by side on a device machine (one GPU, many cores:
# nvcc is most of their time), each group's pytest output kept as
# $OUT/gpu_<group>_<commit>.txt. A group is a quoted list of pytest arguments.
#
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_gpu_tests.sh NAME='ARGS' [NAME='ARGS' ...]
#
# e.g.  flex='tests/pipeline/test_flex_attention_gpu.py tests/corpus/test_attn_gym_corpus_gpu.py'
#       hooks='tests/lower/test_hooks_gpu.py -k "fa_sm90 or key_run"'
# A group's arguments split as a shell splits them (quotes group words). Each group
# stops at GROUP_TIMEOUT_S (default 540) so its output still comes back.
set -uo pipefail
: "${OUT:?output folder}" "${CUBRIDGE_COMMIT:?commit being tested}"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD PYTHONUNBUFFERED=1
pids=() groups=() status=0
for group in "$@"; do
  name=${group%%=*} args=${group#*=}
  # (the caller's own command line: quotes kept, as the shell reads them)
  if ! eval "argv=($args)" 2>/dev/null; then
    echo "group $name: its arguments do not split as shell words (unbalanced quotes?): $args"
    status=1
    continue
  fi
  timeout "${GROUP_TIMEOUT_S:-540}" python -m pytest -m gpu -q -p no:cacheprovider "${argv[@]}" \
    > "$OUT/gpu_${name}_${CUBRIDGE_COMMIT}.txt" 2>&1 &
  pids+=($!) groups+=("$group")
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  echo "group ${groups[$i]}: exit $rc"
  [ "$rc" -eq 0 ] || status=1
done
exit $status
