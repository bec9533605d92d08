# usage: bash benchmarks/device/early_meta.sh 1|2   (carrying .whl; back to back)
# The MLA decode kernel reading its lengths and pool rows before its PDL wait (the default since
# 2026-12-07, MLABackend.decode_early_metadata) against the form that reads them after it (mla_cuda_probe.py's
# triton_plain), with the GPU tests of the kernel and of the models that run it.
# Call 1: the compile check under the device's triton, the MLA GPU tests, then five alternating rounds of both forms
# at issue 15's four shapes ('stored': the issue's measure; 'latent': the latent-rows kernel first, as the DeepSeek
# layer runs it). Call 2: the kit's full tier for the mla backend on CUDA, the DeepSeek and MTP GPU tests.
source benchmarks/device/env.sh >/dev/null
PT="python -m pytest -q -p no:cacheprovider -m gpu -rf"
if [ "$1" = 1 ]; then
  python -W ignore -m updraft.attention.triton_kernels.compile_check 2>&1 | grep -i "mla_decode\|fail"
  timeout 240 $PT tests/attention/test_mla_gpu.py > $OUT/t-mla.log 2>&1; tail -3 $OUT/t-mla.log
  timeout 280 python benchmarks/mla_cuda_probe.py --out $OUT/probe --kernels triton_plain --rounds 5 2>&1 | grep -v Warn | tail -10
elif [ "$1" = 2 ]; then
  gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && echo h200 || echo h100)
  timeout 200 python -c "import sys; from updraft.cli import main; sys.exit(main())" kit run --device cuda --backend mla \
    --jobs 4 --no-progress --json $OUT/kit-mla.json --out $OUT/attention-matrix-mla-$gpu.md > $OUT/kit.log 2>&1
  echo "kit rc $?"; tail -3 $OUT/kit.log
  timeout 360 $PT tests/models/test_deepseek_gpu.py tests/spec/test_mtp_gpu.py > $OUT/t-models.log 2>&1; tail -3 $OUT/t-models.log
fi
