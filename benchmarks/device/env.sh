# Sourced first by a device call's script (from the repository root on the device machine; the caller sets R,
# its results folder): the carried wheels installed, paths and the cache under /tmp/c; the default GGUF comes as
# carried parts joined under /tmp/c once all have arrived (one call each, back to back, while the machine stays
# warm): either four raw parts (gguf.part.aa-ad, ~24.6 MB each) or the parts of its xz stream (`xz -6` takes the
# 98.4 MB file to 90.5 MB), each in a folder of its own under .stage/ (every .stage/*/ carried is read). Three xz
# parts (~30.2 MB, .stage/p1-p3) fit beside the tree until 2026-12-04, when the 35.7 MB tracked tree pushed a call
# over 64 MiB: then four (~22.6 MB, .stage/q1-q4), until the 40.8 MiB tree and the fourth part with the eval sets
# went over on 2026-12-07: now five (~18.1 MB, .stage/q1-q5, `split -n 5`). The eval sets (eagle-eval/, 0.5 MB)
# travel in one of those folders (q5) or their own (.stage/p4, with a head to evaluate).
python -m pip install -q --no-deps --root-user-action=ignore .whl/*.whl
export PYTHONPATH=$PWD UPDRAFT_CACHE=/tmp/c UPDRAFT_EVAL_DIR=/tmp/c/eagle-eval PYTHONUNBUFFERED=1
mkdir -p /tmp/c $OUT
# exported: scripts run as child shells (benchmarks/device/head_run.sh) read it too
export GGUF=/tmp/c/SmolLM2-135M-Instruct.Q4_1.gguf
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for d in .stage/*/; do
  cp $d/gguf.*part.* $d/seq.xz.part-* /tmp/c/ 2>/dev/null; [ -d $d/eagle-eval ] && cp -r $d/eagle-eval /tmp/c/
done
if [ ! -f $GGUF ] && ls /tmp/c/gguf.part.ad >/dev/null 2>&1; then
  cat /tmp/c/gguf.part.a[a-d] > $GGUF && sha256sum $GGUF | cut -c1-16
fi
# xz parts (three, or more when the tree grows): joined once the stream they make decodes to its end, so a call
# that has only some of them leaves no partial file
if [ ! -f $GGUF ] && ls /tmp/c/gguf.xz.part.a? >/dev/null 2>&1; then
  cat /tmp/c/gguf.xz.part.a? | python -c "import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)" \
    > $GGUF.tmp 2>/dev/null && mv $GGUF.tmp $GGUF && sha256sum $GGUF | cut -c1-16
  rm -f $GGUF.tmp
fi
# a run's generated sequences (benchmarks/device/data_pack.sh), joined the same way into /tmp/c/sequences.safetensors
if [ ! -f /tmp/c/sequences.safetensors ] && ls /tmp/c/seq.xz.part-* >/dev/null 2>&1; then
  cat /tmp/c/seq.xz.part-* | xz -dc > /tmp/c/sequences.tmp 2>/dev/null && mv /tmp/c/sequences.tmp /tmp/c/sequences.safetensors \
    && echo "sequences joined: $(du -h /tmp/c/sequences.safetensors | cut -f1)"
  rm -f /tmp/c/sequences.tmp
fi
# the base code (main before the change, `git archive` of updraft/ and benchmarks/*.py, without the head's
# weights, which it shares with this checkout) travels in .stage/base
if [ -d .stage/base ] && [ ! -d /tmp/base ]; then
  cp -r .stage/base /tmp/base && cp updraft/heads/smollm2-135m-instruct-eagle3/model.safetensors /tmp/base/updraft/heads/smollm2-135m-instruct-eagle3/
fi
true
