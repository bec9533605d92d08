# call 2 (H200, random weights; carries the GGUF's first part): the decode attention kernel's L2
# prewarm for verify blocks only (the new default) against none, alternating rounds: SmolLM2 and
# 8B-shape decode / verify steps, the SmolLM2 S = 5 cycle; then the attention GPU tests
source benchmarks/results/2026-12-02-h200-verify-prewarm/env.sh
timeout 200 python benchmarks/step_pair.py --out $OUT/pair --models smollm2,llama8b --batch-sizes 1,8 \
  --prewarm verify,off,verify,off 2>&1 | grep -E "verify / decode"
for run in 1:verify 2:off 3:verify; do
  timeout 120 python - "$OUT/cost_${run/:/_}" "${run#*:}" > $OUT/cost_${run/:/_}.log 2>&1 <<'PY'
import runpy, sys
from updraft.attention.triton_backend import TritonBackend
TritonBackend.prewarm_verify = sys.argv[2] == "verify"
sys.argv = ["benchmarks/spec_iteration.py", "--random-smollm", "--skip-speed", "--skip-lossless", "--cost-sizes", "1,8",
            "--out", sys.argv[1]]
runpy.run_path("benchmarks/spec_iteration.py", run_name="__main__")
PY
  grep -E '"(cycle_steps_greedy|cycle_ms_greedy|plain_step_ms)_bs' $OUT/cost_${run/:/_}.log | tr -d ' \n'; echo " <- ${run}"
done
timeout 150 python -m pytest -q -m gpu -p no:cacheprovider tests/attention/test_triton_gpu.py 2>&1 | tail -3
