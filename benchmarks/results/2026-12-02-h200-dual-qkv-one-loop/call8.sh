# call 8 (H200, back to back; carries .stage/p4 with the eval sets, .whl; joins the GGUF staged by calls 5-7): the
# shipped change against main before it with the real model over real text (mt_bench context), two rounds
R=benchmarks/results/2026-12-02-h200-dual-qkv-one-loop
source benchmarks/device/env.sh
bash benchmarks/device/cost_pair.sh real1 --smollm $GGUF
bash benchmarks/device/cost_pair.sh real2 --smollm $GGUF
(cd $OUT && tar czf call8.tgz --remove-files *)
