# call 2 (H200, random weights; carries .stage/base, .stage/p2, .whl): MLA decode with the model's side
# (rotary + norm + cat + the backend's store, against the latent kernel storing the rows + forward_stored),
# the GPU tests of the kernel, DeepSeek and MLA, and the DeepSeek-V2-Lite MTP cycle new then base
R=benchmarks/results/2026-12-02-h200-mla-latent-rows
source benchmarks/device/env.sh
timeout 120 python benchmarks/mla_bench.py --heads 16 --only decode --latent --out $OUT/mla_latent.json 2>&1 | grep -E "^\||wrote|Error" | head -30
timeout 60 python -m pytest -q -m gpu -p no:cacheprovider tests/ops/test_ops_gpu.py -k "latent or rotary or norms" 2>&1 | tail -2
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/models/test_deepseek_gpu.py tests/attention/test_mla_gpu.py 2>&1 | tail -3
for side in new base; do
  dir=$PWD; [ $side = base ] && dir=/tmp/base
  (cd $dir && PYTHONPATH=$dir timeout 140 python benchmarks/mtp_cycle.py --model random:deepseek-v2-lite --sizes 1,8 --steps 1,3 \
     --iters 10 --out $OUT/mtp_2_$side.json > $OUT/mtp_2_$side.log 2>&1); echo "mtp $side rc $?"; tail -6 $OUT/mtp_2_$side.log
done
(cd $OUT && tar czf call2.tgz --remove-files *)
