# call 1 (H200, random weights; carries the GGUF's first part): MLA decode with the new rows stored
# by the attention kernel and the L2 prewarm against the forward before (each lever alone), the
# MLA GPU tests, the DeepSeek-V2-Lite MTP cycle with and without the store launch, and SmolLM2 /
# 8B-shape decode and verify steps with the MHA prewarm on and off (alternating rounds)
source benchmarks/results/2026-12-02-h200-store-prewarm/env.sh
timeout 200 python benchmarks/mla_bench.py --heads 16 --only decode --levers --out $OUT/mla_levers.json 2>&1 | grep -E "^\||TB/s|wrote" | head -50
timeout 120 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_mla_gpu.py tests/attention/test_triton_gpu.py 2>&1 | tail -4
for run in 1:in_kernel 2:store_launch 3:in_kernel; do  # rounds alternate: the same default twice
  flag=$([ "${run#*:}" = store_launch ] && echo --store-launch)
  timeout 150 python benchmarks/mtp_cycle.py --model random:deepseek-v2-lite --sizes 1,8 --steps 1,3 --iters 10 $flag \
    --out $OUT/mtp_${run/:/_}.json 2>&1 | tail -4
done
timeout 200 python benchmarks/step_pair.py --out $OUT/pair --models smollm2,llama8b --batch-sizes 1,8 --prewarm on,off,on,off \
  2>&1 | grep -A40 "^decode and" | grep -E "\||verify / decode"
ls -R $OUT | head -30
