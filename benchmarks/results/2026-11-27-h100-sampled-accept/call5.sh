# call 5 (the same machine): speed, spec / plain in one run, with the real model and the shipped head
source benchmarks/results/2026-11-27-h100-sampled-accept/env.sh
timeout 330 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive,eagle_s5 \
  --num-prompts 64 --bs1-prompts 64 --output-len 256 --out /tmp/si5 2>&1 | grep -v Warn | tail -22
cp /tmp/si5/*.json $OUT/run5-spec_iteration-speed.json
