#!/usr/bin/env bash
# A/B runs of 2026-11-27 (second session): early staged mask bits, ping-pong off, one-SFU sigmoid.
set -u
EXTRA="$@"
run() { PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py "$@" $EXTRA; }
run sigmoid_causal comb_prefix_softcap_sigmoid --header base=.ab/base --header spec=.ab/spec --header nopp=.ab/nopp --seq-lens 4096,2048 --rounds 2 ${OUTDIR:+--out $OUTDIR/sig}
run document_causal share_question --header base=.ab/base --header early=.ab/early --seq-lens 4096,2048 --rounds 2 ${OUTDIR:+--out $OUTDIR/early}
run softcap_causal relative_position --header base=.ab/base --header nopp=.ab/nopp --seq-lens 4096 --rounds 2 ${OUTDIR:+--out $OUTDIR/nopp}
