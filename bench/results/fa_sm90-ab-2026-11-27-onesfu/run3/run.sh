#!/usr/bin/env bash
# A/B of the one-SFU sigmoid as landed (2026-11-27): old = the kernel before it,
# lib = one-SFU weights in unmasked steady blocks.
set -u
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py \
  sigmoid_causal comb_prefix_softcap_sigmoid --header old=.ab/old --header lib=.ab/base \
  --seq-lens 4096,1024,8192,2048 --configs llama2_7b,qwen25_72b --rounds 2 "$@"
