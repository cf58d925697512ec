#!/usr/bin/env bash
# A/B of the one-SFU sigmoid (2026-11-27): old = the kernel before it, v3 = one-SFU
# weights in unmasked steady blocks, lib = v3 leaving a form after two misses in a row.
set -u
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py \
  sigmoid_causal comb_prefix_softcap_sigmoid --header old=.ab/old --header v3=.ab/v3 \
  --header lib=.ab/base --seq-lens 1024,4096,2048 --configs llama2_7b,qwen25_72b --rounds 2 "$@"
