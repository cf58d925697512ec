#!/usr/bin/env bash
# Reproduce a variants report: `cubridge run --no-bench` for every docs/benchmark.md
# variant (IR verification, hook codegen, compile, GPU verification), then one
# `cubridge bench` of all their kernels against the peers, in one process.
#
#   bench/run_variants.sh NAME SEQ_LENS CONFIGS PEERS
#   bench/run_variants.sh h100-ours 1024,2048,4096,8192 llama2_7b,qwen25_72b ""   # ours only
#
# Writes runs/<variant>-<hash>/ and bench/results/NAME/. Needs a GPU and nvcc.
set -uo pipefail
name=${1:?results name}; seq_lens=${2:-4096}; configs=${3:-llama2_7b}; peers=${4-sdpa,flex_triton}
variants=(full causal sliding_window_1024 global_sliding_window prefix_lm document_causal
  share_question causal_blockwise alibi_causal softcap_causal relative_position relu_causal
  sigmoid_causal comb_prefix_softcap_sigmoid)
cub="python -m cubridge.cli"
mkdir -p runs && rm -f runs/*.ok
# Each run is mostly CPU (IR executor, nvcc): run several at once.
printf '%s\n' "${variants[@]}" | OMP_NUM_THREADS=2 xargs -P 8 -I{} \
  sh -c "$cub run examples/specs/{}.py --no-bench > runs/{}.log 2>&1 \
         && touch runs/{}.ok && echo 'run {}: ok' || echo 'run {}: FAILED (runs/{}.log)'"
ok=()
for v in "${variants[@]}"; do [ -f "runs/$v.ok" ] && ok+=("$v"); done  # GPU-verified only
$cub bench "${ok[@]}" --ours runs --seq-lens "$seq_lens" --configs "$configs" \
  --peers "$peers" --name "$name"
