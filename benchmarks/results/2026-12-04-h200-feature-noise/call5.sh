# Call 5 (the machine of calls 1-3 was given back between calls 3 and 4, /tmp lost: call 4 found no GGUF and no
# run G head, and failed at once; p1-p3 were carried again, the GGUF joined, and run G's head, brought back by
# call 3, travelled in .stage/p4/g-head with the eval sets): run G on the six sets, then run H, the control, run G
# without the noise (same seed: the same prompts and answers), evaluated in call 6. Run inline, as here.
source benchmarks/device/env.sh >/dev/null
NAME=g HEAD=.stage/p4/g-head bash benchmarks/device/head_eval.sh
NAME=h INIT=updraft/heads/smollm2-135m-instruct-eagle3 SEED=18 T=0.5 EVAL=0 bash benchmarks/device/head_run.sh
