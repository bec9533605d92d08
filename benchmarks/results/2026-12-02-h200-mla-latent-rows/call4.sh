# call 4 (H200, a fresh machine; carries .whl): where the time goes now, kernel by kernel with PDL off
# (each kernel's own time): MLA decode at 16 heads with the model's side (the latent kernel, the
# decode kernel, the merge), and the SmolLM2 S = 5 cycle at bs 1 (random weights, the shipped head)
R=benchmarks/results/2026-12-02-h200-mla-latent-rows
source benchmarks/device/env.sh
UPDRAFT_PDL=0 timeout 150 python benchmarks/mla_bench.py --heads 16 --only decode --latent --profile \
  --out $OUT/mla_latent_profile_pdl0.json 2>&1 | grep -E "^\||kernels|wrote|Error" | head -40
UPDRAFT_PDL=0 timeout 200 python benchmarks/cycle_profile.py --random-smollm --sizes 1 --out $OUT/cycle_pdl0 2>&1 \
  | grep -v Warning | tail -30
