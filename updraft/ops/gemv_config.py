"""Launch configurations of the small-M GEMMs (``updraft.ops.gemv``): a heuristic, a sweep, a cache.

A configuration is chosen per (kernel kind, N, K, head dim, M bucket, dtype, GPU) and is a set of
host scalars (tile sizes, warps, stages): it never depends on data, so a CUDA graph captures the
same launch it would run eagerly. Where it comes from, in order:

1. ``$UPDRAFT_CACHE/gemv_configs.json`` (default ``~/.cache/updraft``), written by ``tune``
   (``benchmarks/decode_kernels.py --tune`` runs the sweep once per shape and M bucket on the
   GPU) and read once per process;
2. ``gemv_tuned.json`` beside this file: the sweeps updraft ships, keyed like the cache (GPU name
   included), so a known GPU and shape needs no sweep (the H100 runs of
   ``benchmarks/results/2026-11-26-h100-gemv-tuning/``); for a launch the table has no entry of
   this GPU for, the entry of one with the same architecture and SM count (its ``_families``: the
   H200 takes the H100's, both sm_90 with 132 SMs; SmolLM2's launches are latency choices, and a
   faster memory moves them little: ``benchmarks/results/2026-12-01-h200-family-configs/``; its
   own entries: SmolLM2's one-row QKV and the EAGLE-3 head's, which won in its cycle
   (``benchmarks/results/2026-12-02-h200-dual-qkv-one-loop/``), and the 8B shape's bandwidth-bound
   GEMMs at 1-8 rows, tensor-core tiles at every bucket (bs-1 decode step 4.41 -> 4.18 ms:
   ``benchmarks/results/2026-12-02-h200-8b-gemv-tune/``));
3. the heuristic below: the largest column tile that still gives >= 2 programs per SM (so every
   SM streams weight rows from several programs at once), FMA products for 1-2 token rows and
   tensor-core dots (token rows padded to 16) from 3 (the H100 sweep at SmolLM2's shapes picked
   the dot for every GEMM at 3-4 rows); all rows in one program.

A sweep times each launch after the same kernel; in a model step it follows another. The
winners can lose there: SmolLM2's 24-row winners cost ~100 us a bs-4 cycle on the H100, its
48-row QKV winner 5 us a bs-8 cycle (2026-11-27, ``benchmarks/results/2026-11-27-h100-split-rows``),
so the shipped table keeps only what also won in the step (``benchmarks/tune_in_cycle.py`` times
candidates in the S = 5 cycle and the plain step themselves).

The sweep times each candidate in a CUDA graph of back-to-back launches, as a decode step runs
them. Timing each launch with its own events (the first tuner) added launch gaps of a few us and
picked configs up to 1.6x slower than the heuristic (the 8B shape's QKV: 38 against 23 us).

``tune`` refuses to run while a CUDA graph is being captured (it launches and times kernels):
configurations are looked up, never measured, inside a capture.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

KINDS = ("linear", "qkv", "gate_up")
M_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class GemvConfig:
    """``block_n``: output columns per program (for the paired kinds ``qkv`` / ``gate_up``: pairs,
    so ``2 * block_n`` weight rows). ``dot``: tensor-core product (token rows padded to 16, or to
    the M bucket past 16) instead of FMA (token rows padded to the M bucket). ``m_tile``: token
    rows per program (a power of two below the bucket; a dot's at least 16): the token rows are
    split over ``ceil(M / m_tile)`` programs per column tile, each streaming the same weight rows
    (L2 serves the repeats); 0: one program holds every row."""

    block_n: int
    block_k: int
    dot: bool
    num_warps: int = 4
    num_stages: int = 3
    m_tile: int = 0

    def rows(self, kind: str) -> int:
        """Weight rows one program streams."""
        return self.block_n * (1 if kind == "linear" else 2)

    def block_m(self, bucket: int) -> int:
        """Token rows one program holds (its tile's M side, padded) at this M bucket."""
        rows = min(self.m_tile, bucket) if self.m_tile else bucket
        return max(16, rows) if self.dot else rows

    def m_programs(self, m: int) -> int:
        """Programs along the token rows for ``m`` rows (1 unless ``m_tile`` splits them)."""
        return -(-m // self.block_m(m_bucket(m)))


def m_bucket(m: int) -> int:
    """The M bucket of ``m`` token rows (1 <= m <= 64): the next power of two."""
    if not 1 <= m <= M_BUCKETS[-1]:
        raise ValueError(f"small-M GEMM: {m} token rows, expected 1..{M_BUCKETS[-1]}")
    return 1 << (m - 1).bit_length()


def units(kind: str, n: int, head_dim: int) -> int:
    """What ``block_n`` tiles: columns (linear), rope pairs (qkv: n / 2), intermediate columns
    (gate_up: n is the intermediate size)."""
    return n // 2 if kind == "qkv" else n


def allowed(kind: str, cfg: GemvConfig, head_dim: int) -> bool:
    """Whether ``cfg`` is legal for ``kind``: a dot needs >= 16 weight rows; a qkv tile must not
    straddle heads (its pairs divide D/2); ``m_tile`` is 0 or a power of two."""
    if cfg.dot and cfg.rows(kind) < 16:
        return False
    if cfg.m_tile < 0 or cfg.m_tile & (cfg.m_tile - 1):
        return False
    return not (kind == "qkv" and (head_dim // 2) % cfg.block_n)


def _block_k(rows: int, bm: int, k: int, dot: bool) -> int:
    """K chunk: FMA keeps the ``rows x M x BLOCK_K`` product near 8K values (64 registers a thread
    at 4 warps); a dot's operands are ``rows x BLOCK_K`` and ``BLOCK_M x BLOCK_K`` bf16 (past 16
    token rows the chunk shrinks so the token tile stays near 4K values)."""
    want = max(64, min(256, 4096 // bm)) if dot else max(32, min(512, 8192 // (rows * bm)))
    return max(16, min(want, triton_next_pow2(k)))


def triton_next_pow2(n: int) -> int:
    return 1 << max(int(n) - 1, 0).bit_length()


def heuristic(kind: str, n: int, k: int, bucket: int, num_sms: int, head_dim: int = 0) -> GemvConfig:
    dot = bucket >= 4
    u = units(kind, n, head_dim)
    legal = [b for b in (64, 32, 16, 8, 4) if allowed(kind, GemvConfig(b, 16, dot), head_dim)]
    if not legal:
        raise ValueError(f"no {kind} tile fits head_dim={head_dim}")
    block = next((b for b in legal if -(-u // b) >= 2 * num_sms), legal[-1])
    rows = block * (1 if kind == "linear" else 2)
    bm = GemvConfig(block, 16, dot).block_m(bucket)
    return GemvConfig(block, _block_k(rows, bm, k, dot), dot, num_warps=4, num_stages=3)


#: Rows at least this long (the 8B shape's 4096 and 14336) are bandwidth-bound at one token row:
#: the sweep gives them deeper pipelines and tensor-core tiles (``candidates``).
LONG_ROW_K = 2048


def candidates(kind: str, n: int, k: int, bucket: int, head_dim: int = 0) -> list[GemvConfig]:
    """The sweep: tile widths x K chunks x warps x pipeline stages, FMA or dot (FMA at any bucket
    whose product tile stays in registers; a dot at one token row only over long rows: it pads
    the row to 16, which costs a short row's latency-bound launch, while a long row's
    bandwidth-bound stream gains from the dot's tiles: the 8B shape's one-row step on the H200
    4.405 -> 4.181 ms with the 6-row sweep's dot tiles, ``benchmarks/results/2026-12-02-h200-8b-gemv-tune``),
    legal ones only. Long rows (K >= 2048: the 8B shape's
    4096 and 14336) try longer chunks and deeper pipelines, where more weight bytes must be in
    flight per program. Past 16 token rows, dots also split the rows over programs
    (``m_tile`` 16 or 32). A few dozen to a hundred per shape: each distinct one is a compile,
    ~1 s. (64-column tiles past 8 rows, swept on the H200, won only at 48 rows, where the fused
    layers still lose to cuBLAS, and for the 8B gate/up at 12 rows by 1.3%; not offered,
    ``benchmarks/results/2026-12-02-h200-wide-rows``.)"""
    out = []
    # a fifth stage for long rows: the 8B down projection's 8-row dot tile was fastest at 256 x 5
    # (41.9 us against 42.6 at 1024 x 3; a wider sweep on the H100, 2026-11-26)
    depths = ((4, 3), (4, 4), (8, 3), (8, 4)) + (((4, 5),) if k >= LONG_ROW_K else ())
    m_tiles = (0,) + tuple(t for t in (16, 32) if t < bucket)
    for dot in ((False,) if bucket == 1 and k < LONG_ROW_K else (False, True)):
        for m_tile in (m_tiles if dot else (0,)):
            for block in (4, 8, 16, 32):
                for bk in _chunks(k, GemvConfig(block, 16, dot, m_tile=m_tile).block_m(bucket), dot):
                    for warps, stages in depths:
                        cfg = GemvConfig(block, min(bk, triton_next_pow2(k)), dot, warps, stages, m_tile)
                        rows = cfg.rows(kind)
                        if not allowed(kind, cfg, head_dim) or (not dot and rows * bucket * cfg.block_k > 16384):
                            continue
                        if -(-units(kind, n, head_dim) // block) < 16:  # too few programs to stream
                            continue
                        out.append(cfg)
    return sorted(set(out), key=lambda c: (c.dot, c.m_tile, c.block_n, c.block_k, c.num_warps, c.num_stages))


def _chunks(k: int, block_m: int, dot: bool = False) -> tuple[int, ...]:
    """K chunks to try: longer for long rows; a 32-64-row token tile takes shorter chunks, which
    keep the dot's operands in registers. An FMA tile over a row that 512 does not divide (576:
    SmolLM2's, EAGLE-3's two inputs of 576 each) also tries one chunk of 1024: the whole row in one
    step, where 512 leaves a second step with 64 live columns (H200, 2026-12-02: SmolLM2's one-row
    QKV and the head's; the o_proj's and gate/up's did not win,
    ``benchmarks/results/2026-12-02-h200-dual-qkv-one-loop``)."""
    if block_m >= 32:
        return (64, 128, 256)
    if k >= LONG_ROW_K:
        return (256, 512, 1024)
    return (128, 256, 512) + ((1024,) if not dot and k % 512 else ())


# ---- the cache file ------------------------------------------------------------------------
def cache_path() -> Path:
    return Path(os.environ.get("UPDRAFT_CACHE") or Path.home() / ".cache" / "updraft") / "gemv_configs.json"


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def key(kind: str, n: int, k: int, bucket: int, dtype: torch.dtype, device: torch.device, head_dim: int = 0) -> str:
    return _key(_device_name(device), kind, n, k, bucket, dtype, head_dim)


def _key(gpu: str, kind: str, n: int, k: int, bucket: int, dtype: torch.dtype, head_dim: int) -> str:
    return f"{gpu}|{kind}|n={n}|k={k}|d={head_dim}|m={bucket}|{str(dtype).removeprefix('torch.')}"


SHIPPED = Path(__file__).with_name("gemv_tuned.json")


def _read_raw(path: Path) -> dict:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _entries(raw: dict) -> dict[str, GemvConfig]:
    """The launch configs of a table (keys starting with "_" are its metadata)."""
    return {k: GemvConfig(**v) for k, v in raw.items() if isinstance(v, dict) and not k.startswith("_")}


def _read(path: Path) -> dict[str, GemvConfig]:
    return _entries(_read_raw(path))


@functools.cache
def family(device: torch.device) -> str:
    """``sm{major}{minor}x{SMs}``: GPUs whose launch configs transfer (same cores, same grid);
    "" where CUDA cannot be asked (no family shares entries then)."""
    if device.type != "cuda":
        return device.type
    if not torch.cuda.is_available():
        return ""
    props = torch.cuda.get_device_properties(device)
    return f"sm{props.major}{props.minor}x{props.multi_processor_count}"


@functools.cache
def _shipped_raw() -> dict:
    return _read_raw(SHIPPED)


@functools.cache
def _shipped() -> dict[str, GemvConfig]:
    return _entries(_shipped_raw())


@functools.cache
def _shipped_families() -> dict[str, str]:
    """The shipped table's GPUs (name -> ``family``)."""
    fams = _shipped_raw().get("_families", {})
    return {str(k): str(v) for k, v in fams.items()} if isinstance(fams, dict) else {}


@functools.cache
def _table() -> dict[str, GemvConfig]:
    return _read(cache_path())


@functools.cache
def _num_sms(device: torch.device) -> int:
    # Under the interpreter every program is a Python loop: few wide programs are fastest.
    return torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 1


def lookup(kind: str, n: int, k: int, m: int, dtype: torch.dtype, device: torch.device, head_dim: int = 0) -> GemvConfig:
    """The configuration for this launch (cache, else heuristic). Pure host work, graph-safe."""
    bucket = m_bucket(m)
    hit = _tuned(kind, n, k, bucket, dtype, device, head_dim)
    return hit if hit is not None else heuristic(kind, n, k, bucket, _num_sms(device), head_dim)


def _tuned(kind: str, n: int, k: int, bucket: int, dtype: torch.dtype, device: torch.device,
           head_dim: int = 0) -> GemvConfig | None:
    """The tuned config for this launch, if any: the user's cache, then the shipped table, for this
    GPU; only where neither has it, the shipped entries of a GPU of its family."""
    own = _device_name(device)
    name = _key(own, kind, n, k, bucket, dtype, head_dim)
    for table in (_table(), _shipped()):
        hit = table.get(name)
        if hit is not None and allowed(kind, hit, head_dim):
            return hit
    fam = family(device)
    for gpu in sorted(g for g, f in _shipped_families().items() if f == fam and g != own):
        hit = _shipped().get(_key(gpu, kind, n, k, bucket, dtype, head_dim))
        if hit is not None and allowed(kind, hit, head_dim):
            return hit
    return None


@functools.cache
def is_tuned(kind: str, n: int, k: int, bucket: int, dtype: torch.dtype, device: torch.device, head_dim: int = 0) -> bool:
    """Whether ``lookup`` finds a tuned config (the user's cache or the shipped table) for this
    launch rather than falling back to the heuristic (the fused policy's test for wide rows)."""
    return _tuned(kind, n, k, bucket, dtype, device, head_dim) is not None


def tune(kind: str, n: int, k: int, bucket: int, dtype: torch.dtype, device: torch.device,
         run: Callable[[GemvConfig], Callable[[], object]], head_dim: int = 0, reps: int = 24,
         keep: Callable[[GemvConfig], bool] | None = None) -> tuple[GemvConfig, float]:
    """Time every candidate (``run(cfg)`` returns a closure launching one GEMM with it; ``keep``:
    only the candidates it accepts), store the fastest in the cache file, return it and its time
    in seconds. CUDA only, never in a capture."""
    if device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        raise RuntimeError("gemv tune: needs a CUDA device and no graph capture in progress")
    timed: list[tuple[float, GemvConfig]] = []
    for cfg in (c for c in candidates(kind, n, k, bucket, head_dim) if keep is None or keep(c)):
        try:
            fn = run(cfg)
            fn()  # compile + warm (and the argmax counter allocated outside the capture)
            timed.append((graph_seconds(fn, reps), cfg))
        except Exception:  # a config the compiler rejects (shared memory, registers) just loses
            continue
    if not timed:
        raise RuntimeError(f"gemv tune: no candidate ran for {kind} n={n} k={k} m={bucket}")
    t, best = min(timed, key=lambda tc: tc[0])
    store(key(kind, n, k, bucket, dtype, device, head_dim), best)
    return best, t


def graph_seconds(fn: Callable[[], object], reps: int, replays: int = 5) -> float:
    """Seconds per call of ``fn`` (already warmed up), ``reps`` back-to-back calls captured in one
    CUDA graph and replayed ``replays`` times (as a decode step runs them: no launch gaps; a
    per-launch event would time those). For the sweep, L2 (50 MB on an H100) holds a small
    model's layer: ``run``'s closures rotate over weight copies larger than it, so a launch reads
    its weights from memory as in a decode step."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(reps):
            fn()
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1000.0 / (replays * reps)


def store(k: str, cfg: GemvConfig) -> None:
    """Add one entry to the cache file (read-modify-write; the in-process table is refreshed)."""
    path = cache_path()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        raw = {}
    raw[k] = asdict(cfg)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(raw, indent=1, sort_keys=True))
    tmp.replace(path)
    reread()


def reread() -> None:
    """Forget the in-process copy of the user's cache file (read again at the next lookup): after
    the file or ``$UPDRAFT_CACHE`` changed other than through ``store``."""
    _table.cache_clear()
    is_tuned.cache_clear()
