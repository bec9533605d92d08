# call 3 (H200, random weights; carries the GGUF's first part): copy bandwidth, SmolLM2 and 8B-shape
# cycle costs, decode / verify steps, kernels per step, MLA decode bandwidth, the V2-Lite MTP cycle
source benchmarks/results/2026-12-01-h200-baseline/env.sh
python - <<'PY' 2>&1 | tee $OUT/copy_bw.txt
import torch
x = torch.empty(2 * 1024**3, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record()
for _ in range(10): y.copy_(x)
e.record(); torch.cuda.synchronize()
print(f"device copy: {2 * x.numel() * 10 / (s.elapsed_time(e) / 1e3) / 1e12:.3f} TB/s (bytes read + written)")
PY
timeout 150 python benchmarks/spec_iteration.py --random-smollm --skip-speed --skip-lossless --cost-sizes 1,8 \
  --out $OUT/cost-smollm2 > $OUT/cost-smollm2.log 2>&1; grep -iE "cycle|plain step|host" $OUT/cost-smollm2.log | head -20
timeout 100 python benchmarks/step_pair.py --out $OUT/pair --models smollm2 --batch-sizes 1,8 2>&1 | grep -A8 "^decode and"
timeout 200 python benchmarks/spec_iteration.py --eight-b --skip-speed --skip-lossless --out $OUT/cost-8b > $OUT/cost-8b.log 2>&1
grep -iE "cycle|step|tpot" $OUT/cost-8b.log | head -20
timeout 100 python benchmarks/cycle_profile.py --random-smollm --sizes 1 --out $OUT/profile > $OUT/profile.log 2>&1; grep "==" $OUT/profile.log
BW=$(grep -oE "[0-9.]+ TB/s" $OUT/copy_bw.txt | cut -d' ' -f1)
timeout 120 python benchmarks/mla_bench.py --heads 16 --only decode --peak-tbps ${BW:-4.3} --out $OUT/mla_bench.json 2>&1 | grep -E "^\|" | head -12
timeout 200 python benchmarks/mtp_cycle.py --model random:deepseek-v2-lite --sizes 1,8 --steps 1,3 --iters 10 --out $OUT/mtp 2>&1 | tail -8
ls -R $OUT | head -40
