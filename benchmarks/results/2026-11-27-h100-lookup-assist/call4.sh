# call 4 (the GGUF under /tmp/c from call 3): lossless in fp32 (the assist on by default) and the
# S = 5 cycle in mt_bench context.
source benchmarks/results/2026-11-27-h100-lookup-assist/env.sh
timeout 560 python benchmarks/spec_iteration.py --smollm $GGUF --skip-speed --out $OUT/lossless > $OUT/call4-lossless.log 2>&1
tail -30 $OUT/call4-lossless.log; cp $OUT/lossless/spec_iteration.json $OUT/run4-spec_iteration-lossless.json; rm -r $OUT/lossless
