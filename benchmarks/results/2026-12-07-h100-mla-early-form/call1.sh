# usage: bash benchmarks/device/early_copies.sh 1   (carrying .whl)
# The MLA decode kernel's early form (MLABackend.decode_early_copies; attention/triton_kernels/pdl_sink.py moves its
# first blocks' copies above the PDL wait) against the plain form: the compile check's count of copy groups before the
# wait under the device's triton, the MLA GPU tests that run the early form (the race test among them), then
# mla_cuda_probe.py's alternating rounds of both forms at issue 15's four shapes ('stored': the issue's measure;
# 'latent': the latent-rows kernel first, as the DeepSeek layer runs it), and the 'latent' side again with the
# latent-rows kernel launched with PDL (UPDRAFT_PDL=all: the elementwise family on).
source benchmarks/device/env.sh >/dev/null
PT="python -m pytest -q -p no:cacheprovider -m gpu -rf"
if [ "$1" = 1 ]; then
  python -W ignore -m updraft.attention.triton_kernels.compile_check 2>&1 | grep -i "mla_decode\|fail"
  timeout 240 $PT tests/attention/test_mla_gpu.py -k "early or deepseek or padded" > $OUT/t-mla-early.log 2>&1
  tail -3 $OUT/t-mla-early.log
  timeout 300 python benchmarks/mla_cuda_probe.py --out $OUT/probe --kernels triton_early --rounds 3 2>&1 | grep -v Warn | tail -10
  UPDRAFT_PDL=all timeout 120 python benchmarks/mla_cuda_probe.py --out $OUT/probe-pdl-all --kernels triton_early --rounds 3 \
    --sides latent --shapes 8x8192,64x8192 2>&1 | grep -v Warn | tail -4
fi
