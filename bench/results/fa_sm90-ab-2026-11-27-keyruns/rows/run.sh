#!/usr/bin/env bash
# A/B of the next tile's staged query reads issued before this tile's epilogue
# (2026-11-27): head = a3fbc4b; rows = the consumer loads the next tile's row_staged
# values right after opening it, not at the top of that tile.
set -u
rm -rf .abcache && mkdir -p .abcache && xz -d < .ab/abcache.tar.xz | tar -C .abcache -xf -
V="document_causal share_question causal"
H="--header head=.ab/runs --header rows=.ab/rows"
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py $V $H \
  --seq-lens 4096,1024,2048,8192 --configs llama2_7b --rounds 3 --out $OUT/ab-llama 2>&1 | tail -3
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py $V $H \
  --seq-lens 4096,2048 --configs qwen25_72b --rounds 3 --out $OUT/ab-qwen 2>&1 | tail -3
