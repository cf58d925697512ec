#!/usr/bin/env bash
# Every docs/benchmark.md variant through `cubridge run` on a device machine, then
# `cubridge bench` of their kernels against the peers, in phases that each fit
# one device call (the machine keeps runs/ between calls while it stays warm).
# Results go to $OUT (the device tool's output folder) as they are written.
#
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_variants.sh runs [KERNEL]
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_variants.sh bench CONFIGS PEERS [NAME]
#
# `runs`: `cubridge run --no-bench` for each variant (IR verification, hooks,
# compile, GPU verification), eight at a time, with `--kernel KERNEL` if given
# (else the library's selection for the GPU); logs and verification tables are
# copied to $OUT/<name>-runs/. `bench`: one `cubridge bench` of the GPU-verified
# variants' kernels at S = 4096 for CONFIGS (comma-separated) against PEERS.
set -uo pipefail
: "${OUT:?output folder}" "${CUBRIDGE_COMMIT:?commit being measured}"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
phase=${1:?runs or bench}
variants=(full causal sliding_window_1024 global_sliding_window prefix_lm document_causal
  share_question causal_blockwise alibi_causal softcap_causal relative_position relu_causal
  sigmoid_causal comb_prefix_softcap_sigmoid)
cub="python -m cubridge.cli"
if [ "$phase" = runs ]; then
  kernel=${2:-}
  name=h100-variants-${kernel:-selected}-$CUBRIDGE_COMMIT
  flag=${kernel:+--kernel $kernel}
  mkdir -p runs && rm -f runs/*.ok  # ($OUT keeps two folder levels: $OUT/NAME-runs/VARIANT/)
  printf '%s\n' "${variants[@]}" | OMP_NUM_THREADS=2 xargs -P 8 -I{} \
    sh -c "$cub run examples/specs/{}.py --no-bench $flag > runs/{}.log 2>&1 \
           && touch runs/{}.ok && echo 'run {}: ok' || echo 'run {}: FAILED (runs/{}.log)'"
  for v in "${variants[@]}"; do
    d=$(ls -dt runs/$v-*/ 2>/dev/null | head -1)
    mkdir -p "$OUT/$name-runs/$v"
    cp runs/$v.log "$OUT/$name-runs/$v/run.log" 2>/dev/null
    [ -n "$d" ] && cp "$d"/verify_ir.txt "$d"/verify_gpu.txt "$d"/report.md "$OUT/$name-runs/$v/" 2>/dev/null
  done
  exit 0
fi
configs=${2:?configs}; peers=${3-sdpa,flex_triton}
name=${4:-h100-variants-bench-${configs//,/-}-$CUBRIDGE_COMMIT}
ok=()
for v in "${variants[@]}"; do [ -f "runs/$v.ok" ] && ok+=("$v"); done  # GPU-verified only
$cub bench "${ok[@]}" --ours runs --seq-lens 4096 --configs "$configs" --peers "$peers" \
  --name "$name" --out-dir "$OUT" && python bench/vs_causal.py "$OUT/$name/results.json" \
  > "$OUT/$name/vs_causal.md"
