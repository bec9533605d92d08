# calls 9-10 staged GGUF parts 1-2 on a new machine (cp only); calls 11-12 failed in seconds (the
# eval sets were not copied to /tmp/c: load_prompts raised FileNotFoundError). Call 13: the
# large batches again, plain and adaptive S, to see whether call 8's bs-32/64 ratios were noise
source benchmarks/results/2026-11-27-h100-cycle-kernels/env.sh; cp -r .stage/c/eagle-eval /tmp/c/; PYTHONPATH=$PWD timeout 125 python benchmarks/spec_iteration.py --smollm $GGUF --skip-lossless --variants plain,eagle_adaptive --num-prompts 64 --bs1-prompts 64 --output-len 256 --sizes 8,32,64 --out /tmp/sp-new 2>&1 | grep -E "greedy bs" | cut -c1-90; cp /tmp/sp-new/spec_iteration.json $OUT/run11-spec_iteration-speed-large.json
