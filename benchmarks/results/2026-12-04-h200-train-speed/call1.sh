# Call 1 (carries .whl, .stage/q1 (the GGUF's first xz part) and .stage/base (this tree with the training
# forward before the one-SDPA change of 81a6b33)): the draft head's optimizer step, old attention / unpadded /
# padded / compiled at 16,384 and 32,768 tokens a batch, then the compiled step's GPU test. It ran
# benchmarks/device/train_speed.sh as of e6d1e98, kept here (the script now measures the next question).
bash benchmarks/results/2026-12-04-h200-train-speed/train_speed.sh
