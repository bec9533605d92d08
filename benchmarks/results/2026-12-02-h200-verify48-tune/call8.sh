# Call 8 (the machine of call 7, right after it): call 6's GPU test output had been cut to its summary; the
# first run (with call 7 after it, as call7.sh) showed a device-side assert from the test's own KV pool
# (64 rows for a store at every third slot: too small past 21 rows). With the pool sized 3 * m:
source benchmarks/device/env.sh >/dev/null
UPDRAFT_CACHE=/tmp/empty timeout 300 python -m pytest -m gpu -q tests/ops/test_gemv_gpu.py -p no:cacheprovider --tb=short 2>&1 | grep -v Warn | tail -8
# -> 26 passed, 4 failed: the 24- and 48-row cases at the LM head's argmax ("argmax over 48 rows (at most 16)",
# a launcher assertion: the argmax epilogue takes 16 rows); the test now stops before the LM head past 16 rows.
