# call 4: tune SmolLM2's four layer GEMMs as the layer now launches them (NormedRows consumers,
# add-norm producers) at 6 and 48 token rows (buckets 8, 64) into $UPDRAFT_CACHE; the GEMMs
# with those configs; the bs-8 verify (48 rows) unfused against the fused layers, by kernel;
# GGUF part 1 staged
source benchmarks/results/2026-11-27-h100-draft-launches/env.sh
cp .stage/a/gguf.part.aa /tmp/c/ 2>/dev/null
rm -f /tmp/c/gemv_configs.json
timeout 420 python benchmarks/decode_kernels.py --models smollm2 --tune --gemms qkv,o,gate_up,down --m-values 6,48 \
  --skip-steps --out /tmp/dk4 2>&1 | grep -v Warn | tail -10
cp /tmp/dk4/decode_kernels.json $OUT/run4-decode_kernels-tuned-gemms.json; cp /tmp/c/gemv_configs.json $OUT/run4-gemv_configs.json
python benchmarks/decode_kernels.py --models smollm2 --skip-gemms --variants unfused,fused_rows64 --batch-sizes 8 \
  --out /tmp/dk4s 2>&1 | grep -v Warn | tail -8
cp /tmp/dk4s/decode_kernels.json $OUT/run4-decode_kernels-bs8-steps.json
