#!/usr/bin/env bash
# A/B of mask bits from key runs (2026-11-27): base = f8a148e; a = table headers skip
# the key-range round when the key blocks fit two windows; runs = a + masked blocks
# of staged masks whose key values change at most once set their bits as ranges.
set -u
rm -rf .abcache && mkdir -p .abcache && xz -d < .ab/abcache.tar.xz | tar -C .abcache -xf -
V="document_causal share_question causal"
H="--header base=.ab/base --header a=.ab/a --header runs=.ab/runs"
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py $V $H \
  --seq-lens 4096,1024,2048,8192 --configs llama2_7b --rounds 2 --out $OUT/ab-llama 2>&1 | tail -3
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py $V $H \
  --seq-lens 4096 --configs qwen25_72b --rounds 2 --out $OUT/ab-qwen 2>&1 | tail -3
