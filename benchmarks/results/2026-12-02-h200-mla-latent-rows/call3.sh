# call 3 (H200, a fresh machine; carries .whl): the ops GPU tests three times (their positions are
# drawn unseeded), the DeepSeek and MLA GPU tests, and the MTP cycle of this change again (rounds
# alternate with call 2's: new, base, new)
R=benchmarks/results/2026-12-02-h200-mla-latent-rows
source benchmarks/device/env.sh
for i in 1 2 3; do
  timeout 60 python -m pytest -q -m gpu -p no:cacheprovider tests/ops/test_ops_gpu.py -k "latent or rotary or norms" --tb=line 2>&1 | tail -3
done
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/models/test_deepseek_gpu.py tests/attention/test_mla_gpu.py 2>&1 | tail -3
timeout 140 python benchmarks/mtp_cycle.py --model random:deepseek-v2-lite --sizes 1,8 --steps 1,3 --iters 10 \
  --out $OUT/mtp_3_new.json > $OUT/mtp_3_new.log 2>&1; echo "mtp new rc $?"; tail -3 $OUT/mtp_3_new.log
