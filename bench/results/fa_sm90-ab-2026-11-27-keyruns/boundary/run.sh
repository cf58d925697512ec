#!/usr/bin/env bash
# A/B of the tile boundary for table-driven masks (2026-11-27): base = f8a148e;
# a = table headers skip the key-range round when the key blocks fit two windows;
# bblock = a + the last tile's V issued before the next tile's walk (table headers);
# abc = bblock + a consumer whose next tile is not in yet runs its last PV product
# and epilogue first.
set -u
mkdir -p .abcache && xz -d < .ab/abcache.tar.xz | tar -C .abcache -xf -
V="document_causal share_question causal sliding_window_1024 global_sliding_window prefix_lm full softcap_causal"
H="--header base=.ab/base --header a=.ab/a --header bblock=.ab/bblock --header abc=.ab/abc"
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py $V $H \
  --seq-lens 4096,1024,8192 --configs llama2_7b --rounds 2 --out $OUT/ab-llama 2>&1 | tail -5
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py $V $H \
  --seq-lens 4096 --configs qwen25_72b --rounds 2 --out $OUT/ab-qwen 2>&1 | tail -5
