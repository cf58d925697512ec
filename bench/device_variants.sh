#!/usr/bin/env bash
# One device-machine session for an issue-5 measurement (what produced the
# h100-variants-<commit>* folders): `cubridge run --no-bench` for every
# docs/benchmark.md variant, then `cubridge bench` of their kernels, ours alone and
# against SDPA and FlexAttention (Triton), at S = 4096 in both head configs.
# Results go to $OUT (the device tool's output folder) as they are written.
#
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_variants.sh
set -uo pipefail
: "${OUT:?output folder}" "${CUBRIDGE_COMMIT:?commit being measured}"
export PYTHONPATH=$PWD
name=h100-variants-$CUBRIDGE_COMMIT
variants=(full causal sliding_window_1024 global_sliding_window prefix_lm document_causal
  share_question causal_blockwise alibi_causal softcap_causal relative_position relu_causal
  sigmoid_causal comb_prefix_softcap_sigmoid)
cub="python -m cubridge.cli"
mkdir -p runs "$OUT/$name/runs" && rm -f runs/*.ok
printf '%s\n' "${variants[@]}" | OMP_NUM_THREADS=2 xargs -P 8 -I{} \
  sh -c "$cub run examples/specs/{}.py --no-bench > runs/{}.log 2>&1 \
         && touch runs/{}.ok && echo 'run {}: ok' || echo 'run {}: FAILED (runs/{}.log)'"
ok=()
for v in "${variants[@]}"; do
  [ -f "runs/$v.ok" ] && ok+=("$v")
  d=$(ls -dt runs/$v-*/ 2>/dev/null | head -1)
  mkdir -p "$OUT/$name/runs/$v"
  cp runs/$v.log "$OUT/$name/runs/$v/run.log" 2>/dev/null
  [ -n "$d" ] && cp "$d"/verify_ir.txt "$d"/verify_gpu.txt "$d"/report.md "$OUT/$name/runs/$v/" 2>/dev/null
done
bench() {  # name peers
  $cub bench "${ok[@]}" --ours runs --seq-lens 4096 --configs llama2_7b,qwen25_72b \
    --peers "$2" --name "$1" && cp -r "bench/results/$1" "$OUT/" \
    && python bench/vs_causal.py "bench/results/$1/results.json" > "$OUT/$1/vs_causal.md"
}
bench "$name" ""
bench "$name-peers" "sdpa,flex_triton"
