# usage: WORK=/tmp/M bash benchmarks/device/data_pack.sh
# Brings a training run's generated sequences back from the device (the features are not kept: teacher forcing
# rebuilds them in ~40 s, where generating 40,000 answers takes ~190 s): $WORK/data/sequences.safetensors as the
# parts of its xz stream, $OUT/data/seq.xz.part-NN of at most 15 MB each (the device tool returns files of at most
# 16 MiB, 8 a call). To use them on a fresh machine, carry each part in a .stage/ folder of its own (beside the
# GGUF's parts, one folder a call); benchmarks/device/env.sh joins them into /tmp/c/sequences.safetensors once the
# stream is whole, and the call script copies that file into its $WORK/data/ before the trainer runs (which
# reuses it when its metadata matches the run's config, and then teacher-forces only).
: "${WORK:?}" "${OUT:?}"
mkdir -p $OUT/data
xz -T0 -6 -c $WORK/data/sequences.safetensors | split -b 15000000 -d - $OUT/data/seq.xz.part-
ls -l $OUT/data | tail -n +2 | awk '{print $5, $9}'
