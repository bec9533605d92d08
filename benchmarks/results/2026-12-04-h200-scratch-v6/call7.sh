# Calls 7-10 carried .stage/q1-q3 (../2026-12-04-h200-feature-noise/call1.sh) and .stage/p4 (the eval sets and
# run L's head as call 5 brought it back, step 8,786 of 11,055, in L-head/; copied to /tmp): the machine of calls
# 1-5 was given back while call 6 was being written, /tmp lost with run L's data and checkpoint. Call 11 (carries
# .stage/q4: the GGUF joins): that head's own drafts and the default lookup assist on the six eval sets.
source benchmarks/device/env.sh
[ -d .stage/p4/L-head ] && rm -rf /tmp/L-head && cp -r .stage/p4/L-head /tmp/L-head
[ -f "$GGUF" ] && NAME=L8786 HEAD=/tmp/L-head EVAL_TIMEOUT=140 bash benchmarks/device/head_eval.sh
true
