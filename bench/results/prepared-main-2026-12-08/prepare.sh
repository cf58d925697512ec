#!/usr/bin/env bash
# Builds .ab/ for device12.sh on a CPU machine (nvcc 13.0, the project installed): the
# nvidia-cutlass wheel, the user specs and their run directories (IR verification and
# sm_90a builds done here), and the A/B packs (both sides' cubins, built here).
#   bash bench/results/prepared-main-2026-12-08/prepare.sh REF   # REF: a commit before the changes (830d693)
set -euo pipefail
ref=${1:-830d693}
here=bench/results/prepared-main-2026-12-08
R=bench/results
grep -qx '/.ab/' .git/info/exclude || echo '/.ab/' >> .git/info/exclude
mkdir -p .ab/wheels .ab/specs/u .ab/specs/ab .ab/pre
cp $here/device12.sh .ab/device12.sh
ls .ab/wheels/nvidia_cutlass-*.whl >/dev/null 2>&1 || pip download -q --no-deps -d .ab/wheels nvidia-cutlass
# the user specs run against every peer
cp $R/cpu-user-specs-2026-12-07-late/specs/*.py .ab/specs/u/
rm -f .ab/specs/u/python_list_slopes.py   # a user error on purpose (its message is the result)
cp $R/prepared-trace-ops/specs/finfo_min_causal.py $R/prepared-next-device/specs/finfo_window_empty_rows.py \
   $R/prepared-trace-ops/specs/fmod_signed_period.py $R/prepared-odd-periods/specs/dilated_every_third.py \
   $R/h100-user-specs-9d2b4b3/specs/longformer.py $R/h100-user-specs-9d2b4b3/specs/causal_drop4.py \
   $R/h100-user-specs-9d2b4b3/specs/negative_floor_band.py .ab/specs/u/
cp examples/specs/dit_xl.py .ab/specs/u/   # (head dim 72: zero-filled to whole k-steps)
export CUBRIDGE_CACHE_DIR=${CUBRIDGE_CACHE_DIR:-/tmp/prepare-cache}
for f in .ab/specs/u/*.py; do
  n=$(basename $f .py)
  python -m cubridge.cli run $f --seq-lens 4096 --out .ab/pre/$n > /tmp/pre_$n.log 2>&1 || true
  grep -E "verify-ir|compile\]" /tmp/pre_$n.log | sed "s|^|$n: |" | cut -c1-160
done
# the order of the runs: the specs that use the new lowering first
for n in longformer finfo_min_causal fmod_signed_period block_diagonal_complement cos_distance_bias \
    isin_token_types causal_drop4 negative_floor_band dilated_every_third finfo_window_empty_rows \
    dit_xl; do
  echo .ab/specs/u/$n.py; done > .ab/specs/order.txt
ls .ab/specs/u/*.py | grep -v -x -F -f .ab/specs/order.txt >> .ab/specs/order.txt
# A/B specs and the sides' header folders
cp $R/prepared-trace-ops/specs/sign_direction_bias.py $R/prepared-trace-ops/specs/clamp_max_distance_penalty.py \
   $R/h100-user-specs-9d2b4b3/specs/piecewise_distance_bias.py $R/h100-user-specs-9d2b4b3/specs/longformer.py \
   $R/prepared-trace-ops/specs/fmod_signed_period.py $R/prepared-odd-periods/specs/dilated_every_third.py .ab/specs/ab/
mkdir -p .ab/ab9/tables .ab/ab9/direct .ab/ab11/main .ab/ab11/rows .ab/ab12/main .ab/ab12/keysets
echo '{"table_selects": true}' > .ab/ab9/tables/options.json
# main's side: the header REF generates (its kernel source is the same for these)
tmp=$(mktemp -d); git worktree add -q --detach $tmp $ref
for n in longformer:ab11 fmod_signed_period:ab12 dilated_every_third:ab12; do
  (cd $tmp && python -m cubridge.cli hooks $OLDPWD/.ab/specs/ab/${n%%:*}.py --kernel fa_sm90 --out $tmp/h >/dev/null)
  sed "s|($PWD/.ab/specs/ab/|(.ab/specs/ab/|" $tmp/h/cubridge_hooks.cuh > .ab/${n##*:}/main/${n%%:*}.cuh
done
git worktree remove --force $tmp
A=.ab/specs/ab; ab=bench/kernels/fa_sm90/variant_ab.py
python $ab $A/sign_direction_bias.py $A/clamp_max_distance_penalty.py $A/piecewise_distance_bias.py \
  --header tables=.ab/ab9/tables --header direct=.ab/ab9/direct --seq-lens 4096 \
  --configs llama2_7b,qwen25_72b --compile-only sm_90a --pack .ab/ab9/ab9.tar.xz
python $ab $A/longformer.py --header main=.ab/ab11/main --header rows=.ab/ab11/rows --seq-lens 4096 \
  --configs longformer_base,llama2_7b --compile-only sm_90a --pack .ab/ab11/ab11.tar.xz
python $ab $A/fmod_signed_period.py $A/dilated_every_third.py --header main=.ab/ab12/main \
  --header keysets=.ab/ab12/keysets --seq-lens 4096 --configs llama2_7b,qwen25_72b \
  --compile-only sm_90a --pack .ab/ab12/ab12.tar.xz
du -sh .ab
