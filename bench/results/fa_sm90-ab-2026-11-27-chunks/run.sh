#!/usr/bin/env bash
# A/B of dead-chunk skipping in masked blocks (2026-11-27): prev = the kernel at a237970,
# lib = masked blocks skip the softmax work of 32-key chunks no row of the warp attends.
set -u
PYTHONPATH=$PWD CUBRIDGE_CACHE_DIR=$PWD/.abcache python bench/kernels/fa_sm90/variant_ab.py \
  causal sliding_window_1024 global_sliding_window document_causal full --header prev=.ab/prev \
  --header lib=.ab/base --seq-lens 4096,2048 --configs llama2_7b,qwen25_72b --rounds 2 "$@"
