# Sourced first by a device call's script (from the repository root on the device machine; the caller sets R,
# its results folder): the carried wheels installed, paths and the cache under /tmp/c; the default GGUF comes as
# carried parts joined under /tmp/c once all have arrived (one call each, back to back, while the machine stays
# warm): either four raw parts (.stage/p1-p4, gguf.part.aa-ad, ~24.6 MB each) or three parts of its xz stream
# (.stage/p1-p3, gguf.xz.part.aa-ac, ~30.2 MB each: `xz -6` takes the 98.4 MB file to 90.5 MB, so one call fewer).
# The eval sets (eagle-eval/, 0.5 MB) travel in .stage/p2, p3 or p4: on 2026-12-03 a call carrying p3 with them
# beside the 35.3 MB tracked tree was refused as over 64 MiB, so they went in a p4 of their own (with a head).
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c UPDRAFT_EVAL_DIR=/tmp/c/eagle-eval PYTHONUNBUFFERED=1
mkdir -p /tmp/c $OUT
# exported: scripts run as child shells (benchmarks/device/head_run.sh) read it too
export GGUF=/tmp/c/SmolLM2-135M-Instruct.Q4_1.gguf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for p in p1 p2 p3 p4; do [ -d .stage/$p ] && cp .stage/$p/gguf.*part.* /tmp/c/ 2>/dev/null; done
for p in p2 p3 p4; do [ -d .stage/$p/eagle-eval ] && cp -r .stage/$p/eagle-eval /tmp/c/; done
if [ ! -f $GGUF ] && ls /tmp/c/gguf.part.ad >/dev/null 2>&1; then
  cat /tmp/c/gguf.part.a[a-d] > $GGUF && sha256sum $GGUF | cut -c1-16
fi
if [ ! -f $GGUF ] && ls /tmp/c/gguf.xz.part.ac >/dev/null 2>&1; then
  cat /tmp/c/gguf.xz.part.a[a-c] | python -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" > $GGUF \
    && sha256sum $GGUF | cut -c1-16
fi
# the base code (main before the change, `git archive` of updraft/ and benchmarks/*.py, without the head's
# weights, which it shares with this checkout) travels in .stage/base
if [ -d .stage/base ] && [ ! -d /tmp/base ]; then
  cp -r .stage/base /tmp/base && cp updraft/heads/smollm2-135m-instruct-eagle3/model.safetensors /tmp/base/updraft/heads/smollm2-135m-instruct-eagle3/
fi
true
