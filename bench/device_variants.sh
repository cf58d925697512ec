#!/usr/bin/env bash
# Every docs/benchmark.md variant through `cubridge run` on a device machine, then
# `cubridge bench` of their kernels against the peers, in pieces that each fit
# one device call (the machine keeps runs/ between calls while it stays warm).
# Results go to $OUT (the device tool's output folder) as they are written.
#
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_variants.sh all [NAME]
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_variants.sh runs [KERNEL]
#   CUBRIDGE_COMMIT=<hash> OUT=<dir> bench/device_variants.sh bench CONFIGS PEERS [NAME]
#
# `all`: the whole comparison of docs/benchmark.md, resumable. Each call does
# what fits in BUDGET_S seconds (default 540, under a 10-minute call; a piece is
# expected to take 1.2x the slowest at its S so far, else 1.2x the slowest piece,
# PIECE_ESTIMATE_S=300 before any) and says
# "MORE" (call it again, same arguments) or "DONE". In order: the runs below;
# then one `cubridge bench` per (S, config), S = 4096 first (SEQ_LENS, default
# "4096 8192 2048 1024"; CONFIGS, default "llama2_7b qwen25_72b"), of the
# GPU-verified kernels against PEERS (default sdpa,flex_triton,flex_flash,fa4),
# with do_bench's full 25/100 ms at S = 4096 and 10/30 ms elsewhere (ROUNDS=N: N
# interleaved timing rounds per case, medians: `cubridge bench --rounds`); then the
# merge into $OUT/NAME/ (results.json/md/png, summary.md: each variant against
# the best peer, the geomean, each variant against our causal). Finished pieces
# are kept in runs/_bench-NAME/ and copied to $OUT/NAME-parts/ as they finish,
# with their wall times in timing.txt; each call ends by packing that folder into
# $OUT/NAME-parts.tar.gz (the device returns at most 8 files per call). FA4 and
# Flex FLASH need flash-attn-4 importable (PYTHONPATH); without it the phase
# stops unless ALLOW_NO_FA4=1.
#
# `runs`: `cubridge run --no-bench` for each variant (IR verification, hooks,
# compile, GPU verification), eight at a time, with `--kernel KERNEL` if given
# (else the library's selection for the GPU); logs and verification tables are
# copied to $OUT/<name>-runs/. `bench`: one `cubridge bench` of the GPU-verified
# variants' kernels at S = 4096 for CONFIGS (comma-separated) against PEERS.
set -uo pipefail
: "${OUT:?output folder}" "${CUBRIDGE_COMMIT:?commit being measured}"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
phase=${1:?all, runs or bench}
variants=(full causal sliding_window_1024 global_sliding_window prefix_lm document_causal
  share_question causal_blockwise alibi_causal softcap_causal relative_position relu_causal
  sigmoid_causal comb_prefix_softcap_sigmoid)
cub=${CUB:-python -m cubridge.cli}  # (tests put a stand-in here)

do_runs() {  # do_runs KERNEL NAME: every variant through `cubridge run --no-bench`
  local kernel=$1 name=$2 flag=${1:+--kernel $1}
  mkdir -p runs && rm -f runs/*.ok  # ($OUT keeps two folder levels: $OUT/NAME-runs/VARIANT/)
  printf '%s\n' "${variants[@]}" | OMP_NUM_THREADS=2 xargs -P 8 -I{} \
    sh -c "$cub run examples/specs/{}.py --no-bench $flag > runs/{}.log 2>&1 \
           && touch runs/{}.ok && echo 'run {}: ok' || echo 'run {}: FAILED (runs/{}.log)'"
  local stage; stage=$(mktemp -d)
  for v in "${variants[@]}"; do
    d=$(ls -dt runs/$v-*/ 2>/dev/null | head -1)
    mkdir -p "$stage/$name-runs/$v"
    cp runs/$v.log "$stage/$name-runs/$v/run.log" 2>/dev/null
    [ -n "$d" ] && cp "$d"/verify_ir.txt "$d"/verify_gpu.txt "$d"/report.md "$d"/plan.json \
      "$stage/$name-runs/$v/" 2>/dev/null
  done
  # one archive: the device returns few files per call
  tar -C "$stage" -czf "$OUT/$name-runs.tar.gz" "$name-runs" && rm -rf "$stage"
}

verified() {  # the GPU-verified variants of the last do_runs
  local v; for v in "${variants[@]}"; do [ -f "runs/$v.ok" ] && echo "$v"; done
}

if [ "$phase" = runs ]; then
  kernel=${2:-}
  do_runs "$kernel" "h100-variants-${kernel:-selected}-$CUBRIDGE_COMMIT"
  exit 0
fi

if [ "$phase" = bench ]; then
  configs=${2:?configs}; peers=${3-sdpa,flex_triton}
  name=${4:-h100-variants-bench-${configs//,/-}-$CUBRIDGE_COMMIT}
  mapfile -t ok < <(verified)
  $cub bench "${ok[@]}" --ours runs --seq-lens 4096 --configs "$configs" --peers "$peers" \
    --name "$name" --out-dir "$OUT" && python bench/vs_causal.py "$OUT/$name/results.json" \
    > "$OUT/$name/vs_causal.md"
  exit 0
fi

[ "$phase" = all ] || { echo "unknown phase $phase (all, runs or bench)" >&2; exit 2; }
name=${2:-h100-variants-peers-$CUBRIDGE_COMMIT}
budget=${BUDGET_S:-540}
peers=${PEERS:-sdpa,flex_triton,flex_flash,fa4}
read -ra seq_lens <<< "${SEQ_LENS:-4096 8192 2048 1024}"
read -ra configs <<< "${CONFIGS:-llama2_7b qwen25_72b}"
state=runs/_bench-$name  # kept while the machine stays warm; "_" is no variant's prefix
mkdir -p "$state" "$OUT/$name-parts"
export FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1  # FA4's compiled kernels outlive a process
if [[ ",$peers," == *,fa4,* || ",$peers," == *,flex_flash,* ]] \
   && ! python -c "import flash_attn.cute" 2>/dev/null && [ "${ALLOW_NO_FA4:-0}" != 1 ]; then
  echo "flash-attn-4 does not import here: FA4 and Flex FLASH would be reported 'not" \
       "installed'. Put it on PYTHONPATH (or ALLOW_NO_FA4=1)." >&2
  exit 2
fi
start=$SECONDS
estimate() {  # estimate S: seconds a piece at S is expected to take, +20%: the slowest
  # piece at S so far, else the slowest piece (S = 4096's longer timing makes it the worst)
  local worst; worst=$(awk -v s="s$1-" 'index($1, s) == 1 {print $2}' "$state/timing.txt" \
    2>/dev/null | sort -n | tail -1)
  [ -n "$worst" ] || worst=$(awk '$1 != "runs" {print $2}' "$state/timing.txt" 2>/dev/null \
    | sort -n | tail -1)
  echo $(( ${worst:-${PIECE_ESTIMATE_S:-300}} * 12 / 10 ))
}
fits() {  # fits SECONDS: is there time left in this call for a piece that long?
  [ $(( SECONDS - start + $1 )) -le "$budget" ]
}
record() {  # record PIECE SECONDS
  echo "$1 $2" >> "$state/timing.txt"; cp "$state/timing.txt" "$OUT/$name-parts/timing.txt"
}
pack_parts() {  # this call's pieces as one archive: the device returns 8 files per call
  tar -C "$OUT" -czf "$OUT/$name-parts.tar.gz" "$name-parts" && rm -rf "${OUT:?}/$name-parts"
}

if [ ! -f "$state/runs.done" ]; then
  t0=$SECONDS
  do_runs "" "$name"
  touch "$state/runs.done"; record runs $((SECONDS - t0))
  verified > "$state/verified.txt"
fi
mapfile -t ok < "$state/verified.txt"
echo "GPU-verified through cubridge run: ${#ok[@]} of ${#variants[@]} (${ok[*]})"
for s in "${seq_lens[@]}"; do
  for c in "${configs[@]}"; do
    piece=s$s-$c
    [ -f "$state/$piece/results.json" ] || [ -f "$state/$piece.failed" ] && continue
    if ! fits "$(estimate "$s")"; then
      echo "MORE: $((SECONDS - start)) s used; next piece $piece needs ~$(estimate "$s") s." \
           "Call again with the same arguments."
      pack_parts
      exit 0
    fi
    if [ "$s" = 4096 ]; then timing=(--warmup-ms 25 --rep-ms 100)
    else timing=(--warmup-ms 10 --rep-ms 30); fi
    t0=$SECONDS
    $cub bench "${ok[@]}" --ours runs --seq-lens "$s" --configs "$c" --peers "$peers" \
      "${timing[@]}" --rounds "${ROUNDS:-1}" --name "$piece" --out-dir "$state" \
      > "$state/$piece.log" 2>&1
    record "$piece" $((SECONDS - t0))
    mkdir -p "$OUT/$name-parts/$piece"
    cp "$state/$piece.log" "$state/$piece"/* "$OUT/$name-parts/$piece/" 2>/dev/null
    if [ -f "$state/$piece/results.json" ]; then echo "$piece: $((SECONDS - t0)) s"
    else touch "$state/$piece.failed"; echo "$piece: FAILED, see $name-parts/$piece/$piece.log"
    fi
  done
done
parts=()
for s in "${seq_lens[@]}"; do for c in "${configs[@]}"; do
  [ -f "$state/s$s-$c/results.json" ] && parts+=("$state/s$s-$c/results.json")
done; done
failed=$(cd "$state" && ls -- *.failed 2>/dev/null | sed 's/\.failed$//' | tr '\n' ' ')
$cub bench --merge "${parts[@]}" --name "$name" --out-dir "$OUT" > /dev/null \
  && cp "$state/timing.txt" "$OUT/$name/timing.txt" \
  && echo "DONE: $OUT/$name/summary.md, ${#parts[@]} pieces${failed:+ (FAILED: $failed)}" \
       "($((SECONDS - start)) s in this call)"
pack_parts
