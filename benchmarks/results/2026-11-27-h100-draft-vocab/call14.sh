# tokens/s, spec against plain, with the 16k head and the shipped one (issue 12's table)
source benchmarks/results/2026-11-27-h100-draft-vocab/env.sh
for h in v16k:/tmp/updraft-gpu-head/head shipped:updraft/heads/smollm2-135m-instruct-eagle3; do
  name=${h%%:*}; dir=${h#*:}
  python benchmarks/spec_iteration.py --smollm $GGUF --head $dir --skip-lossless --variants plain,eagle_adaptive,eagle_s5 \
    --num-prompts 64 --bs1-prompts 64 --output-len 256 --out /tmp/speed-$name > /tmp/speed-$name.log 2>&1
  cp /tmp/speed-$name/spec_iteration.json $OUT/speed-$name.json; grep -v Warn /tmp/speed-$name.log | tail -14
done
