#!/usr/bin/env bash
# A/B of the one-SFU sigmoid (2026-11-27): old = the kernel before it, spec1 = first
# form (fp32 range checks), lib = as landed (packed range checks).
set -u
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py \
  sigmoid_causal comb_prefix_softcap_sigmoid --header old=.ab/old --header spec1=.ab/spec \
  --header lib=.ab/base --seq-lens 4096,1024 --configs llama2_7b,qwen25_72b --rounds 2 "$@"
