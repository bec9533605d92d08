"""Call 5: user caches that put back the pre-change entry of one tuned key each ("minus_<gemm>"),
or of every changed key ("old"), so one run per variant shows what each new entry does in the
cycle (the user cache is read before the shipped table).

    python variants.py OLD_TABLE.json DIR  ->  DIR/<variant>/gemv_configs.json
"""

import json
import sys
from pathlib import Path

from updraft.ops import gemv_config

old = json.loads(Path(sys.argv[1]).read_text())
new = json.loads(gemv_config.SHIPPED.read_text())
changed = {k: v for k, v in new.items() if old.get(k) != v and k in old}
out = Path(sys.argv[2])
variants = {"old": dict(changed)}
for k in changed:
    variants["minus_" + k.split("|")[1] + "_" + k.split("|")[3]] = {k: old[k]}
for name, keys in variants.items():
    (out / name).mkdir(parents=True, exist_ok=True)
    (out / name / "gemv_configs.json").write_text(json.dumps({k: old[k] for k in keys}, indent=1))
    print(name, len(keys))
