set -u
python -m pip install -q --no-deps .ab/wheels/nvidia_cutlass*.whl 2>&1 | tail -2
python -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
export CUBRIDGE_CACHE_DIR=/tmp/cubin-cache; mkdir -p $CUBRIDGE_CACHE_DIR
tar -C $CUBRIDGE_CACHE_DIR -xJf .ab/fixed2.tar.xz
mkdir -p $OUT/ab $OUT/sass
for d in $CUBRIDGE_CACHE_DIR/cubin/*/*/; do
  grep -q FP16 $d/recipe.json && continue
  n=$(basename $d | cut -c1-10); cuobjdump -sass $d/kernel.cubin > $OUT/sass/$n.sass
  echo "$n $(head -c 60 $d/source.cu | head -1) lines=$(wc -l < $OUT/sass/$n.sass) MUFU=$(grep -c MUFU $OUT/sass/$n.sass) DEPBAR=$(grep -c 'WARPGROUP.DEPBAR\|WARPGROUP.ARRIVE' $OUT/sass/$n.sass) VOTE=$(grep -c VOTE $OUT/sass/$n.sass) FMNMX=$(grep -c FMNMX $OUT/sass/$n.sass)"
done | tee $OUT/sass/index.txt
xz -9 $OUT/sass/*.sass
timeout 480 python bench/kernels/fa_sm90/variant_ab.py softcap_causal \
  --header head=.ab/head_src --header fixed=.ab/empty --header pin=.ab/fx_pin --header first=.ab/fx_first --header firstpin=.ab/fx_firstpin \
  --seq-lens 4096,8192 --configs llama2_7b,qwen25_72b --rounds 3 --out $OUT/ab > $OUT/ab/log.txt 2>&1
echo rc=$?
python bench/kernels/fa_sm90/ab_table.py $OUT/ab/results.json --medians > $OUT/ab/ab.md 2>&1
cat $OUT/ab/ab.md
