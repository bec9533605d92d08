"""Issue 15's last named lever, probed: MLA decode as a hand-written CUDA kernel
(``benchmarks/cuda/mla_decode.cu``: cached rows copied before the PDL wait, four 32-key stages, two
block barriers a tile) against the shipped Triton kernel, both followed by the same merge launch.

    python benchmarks/mla_cuda_probe.py --out DIR [--rounds 3] [--kernels cuda,cuda_a3,cuda_bulk]

The kernels are compiled here with ``nvcc -cubin -arch=sm_90a`` and launched through the driver API
(``ctypes``, ``cuLaunchKernelEx`` with programmatic stream serialisation: PDL, as the Triton launches
take it; ``NAME_nopdl`` without it). ``cuda``: every thread's 16-byte ``cp.async`` copies; ``cuda_bulk``:
one bulk copy a row from warp 0 on the stages' mbarriers; ``cuda_bulk8``: that on eight warps, two a
scheduler (all three correct and slower than Triton at every shape on the H100 on 2026-12-06,
``results/2026-12-06-h100-recheck/``); ``cuda_a2`` / ``cuda_a3``: ``cuda`` with each thread's slots
loaded two / three tiles ahead instead of one, ``cuda8`` / ``cuda8_a3``: on eight warps, ``_s5``: five
stages (aimed at ``cuda``'s streaming deficit; no faster, ``results/2026-12-06-h100-mla-cuda-variants/``);
``_ln``: each copy instruction on four whole 128-byte lines instead of 64 bytes of eight rows;
``cuda_k64``: three stages of 64-key tiles on eight warps, two block barriers a 64-key tile; ``_cl``
(``cuda_k64_cl``, ``cuda_a3ln_cl``): no merge launch, a request's splits launched as one thread-block cluster
that merges them through distributed shared memory (up to 16 splits; more run the form without ``_cl``), its
check also reporting how many clusters of 16, 14, 12 and 8 CTAs the GPU holds at once (fewer than the requests:
waves; an H100 holds seven of 12, 14 or 16, so bs 8 at those splits ran in two waves on 2026-12-07).
``triton_plain``: the shipped Triton kernel with its metadata read after the PDL wait
(``MLABackend.decode_early_metadata`` off; ``triton`` is the backend's default, before the wait).
``NAME:S`` (``triton:12``, ``cuda_a3ln_cl:12``) runs a form at S KV splits in place of the backend's policy
(any S up to 16 for ``_cl``: each CTA merges its share of the heads' four-column groups).
The Triton kernel's own form of the early copies (its programs'
first 64-256 cached rows bulk-prefetched into L2 before the PDL wait, at 201d306) lost 5.6-6.7 us at
bs 8 / 8k on 2026-12-06 and was removed (``results/2026-12-06-h100-recheck/``); its first tiles copied into
shared memory before the wait (a TTGIR pass moving the wait below the pipeline's prologue) gained ~0.1 us
there, and the loop that keeps those tiles off the block's new rows cost 3-8 us (2026-12-07,
``results/2026-12-07-h100-mla-early-form/``, not shipped; the length and pool row read early were, 0.3-0.4 us). A kernel
replaces ``mla_decode_attention`` inside ``MLABackend`` for one-token decode at 16 heads of 512 + 64
bf16 (DeepSeek-V2-Lite); everything else (metadata, split policy, merge) is the backend's.
``mla_bench.bench`` then times the issue's measure, ``forward_stored`` (the attention after the
layer's latent-rows kernel) in CUDA graphs, Triton and each CUDA variant in alternating rounds in one
process, and checks each against the fp32 reference (``rel err``); each CUDA variant's output is also
compared with the Triton kernel's on the same inputs, per head and per 64-column block, first, in a
child process of its own: a variant that fails there (a trap on a lost bulk copy kills its CUDA
context) is reported and left out of the timing, the others still run. Not the
engine's path: a result to decide whether a CUDA kernel is worth building into the package.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import struct
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).parent))

import mla_bench  # noqa: E402
from attention_bench import copy_tbps, meta  # noqa: E402

SOURCE = Path(__file__).parent / "cuda" / "mla_decode.cu"
#: ``triton_capN``: the shipped kernel with its split merge's grid capped at N% of the SM count
#: (``MLABackend.merge_pdl_grid``; shipped off).
TRITON_FORMS = ("triton", "triton_plain", "triton_cap25", "triton_cap50", "triton_cap100")
HEADS, RANK, ROPE = 16, 512, 64
# STAGES x BN x ROWP bf16 + the score partials + the bulk kernel's STAGES mbarriers (the .cu's layout)
def smem_bytes(stages: int) -> int:
    return stages * 32 * 584 * 2 + 4 * 16 * 36 * 4 + stages * 8


class Spec(NamedTuple):
    """A variant: its entry point, threads, the cubin's STAGES, shared memory bytes where the layout is its own,
    and whether it merges its splits on a thread-block cluster (``_cl``; then ``fallback`` names the variant run
    where the splits do not make a cluster: more than 16)."""

    entry: str
    threads: int
    stages: int = 4
    smem: int | None = None
    fallback: str | None = None


K64_SMEM = 3 * 64 * 584 * 2 + 2 * 16 * 64 * 4
#: 16-byte cp.async copies by every thread, each tile's slots loaded one tile ahead (``cuda``), two or three
#: (``_a2``, ``_a3``), on 4 warps or 8 (``cuda8``), five stages (``_s5``), a warp's copies on whole lines (``_ln``);
#: one bulk copy a row by warp 0 on the stages' mbarriers, on 4 warps and on 8 (``cuda_bulk``, ``cuda_bulk8``);
#: 64-key tiles on 8 warps (``cuda_k64``); the split merge on the request's cluster (``_cl``). Timings:
#: ``results/2026-12-06-h100-mla-cuda-variants/``, ``results/2026-12-07-h100-mla-cluster/`` (every form slower).
KERNELS = {"cuda": Spec("mla_decode_h16", 128), "cuda_a2": Spec("mla_decode_h16_a2", 128),
           "cuda_a3": Spec("mla_decode_h16_a3", 128), "cuda8": Spec("mla_decode_h16_w8", 256),
           "cuda8_a3": Spec("mla_decode_h16_w8a3", 256), "cuda_bulk": Spec("mla_decode_h16_bulk", 128),
           "cuda_bulk8": Spec("mla_decode_h16_bulk8", 256), "cuda_s5": Spec("mla_decode_h16", 128, 5),
           "cuda8_s5a3": Spec("mla_decode_h16_w8a3", 256, 5), "cuda_ln": Spec("mla_decode_h16_ln", 128),
           "cuda8_a3ln": Spec("mla_decode_h16_w8a3ln", 256), "cuda_a3ln": Spec("mla_decode_h16_a3ln", 128),
           "cuda_ln_s5": Spec("mla_decode_h16_ln", 128, 5), "cuda_a3ln_s5": Spec("mla_decode_h16_a3ln", 128, 5),
           "cuda_k64": Spec("mla_decode_h16_k64", 256, 4, K64_SMEM),
           "cuda_a3ln_cl": Spec("mla_decode_h16_a3ln_cl", 128, fallback="cuda_a3ln"),
           "cuda_k64_cl": Spec("mla_decode_h16_k64_cl", 256, 4, K64_SMEM, fallback="cuda_k64")}
#: The largest cluster the launch asks for (16: past the portable 8, allowed per kernel on the H100).
MAX_CLUSTER = 16


def stages_of(name: str) -> int:
    """The ``STAGES`` the cubin of variant ``name`` (a ``KERNELS`` key, ``_nopdl`` allowed) is built with."""
    return KERNELS[name.removesuffix("_nopdl")].stages


def split_name(name: str) -> tuple[str, int | None]:
    """``NAME:S`` as (NAME, S): the variant at ``S`` KV splits in place of the backend's policy (None)."""
    base, _, splits = name.partition(":")
    if splits and not (splits.isdigit() and int(splits) >= 1):
        raise ValueError(f"--kernels: {name!r}: the split count after ':' must be a positive integer")
    return base, int(splits) if splits else None


class Params(ctypes.Structure):
    _fields_ = [(n, ctypes.c_void_p) for n in ("q", "kpool", "mid_o", "mid_lse", "req_to_token", "req_pool_idx",
                                                "seq_lens")] + \
               [(n, ctypes.c_longlong) for n in ("stride_qt", "stride_qh", "stride_ks", "stride_rt", "stride_mt",
                                                  "stride_mh", "stride_ms", "stride_lt", "stride_lh")] + \
               [("num_splits", ctypes.c_int), ("min_split", ctypes.c_int), ("split_block", ctypes.c_int),
                ("scale_log2", ctypes.c_float), ("out", ctypes.c_void_p), ("stride_ot", ctypes.c_longlong),
                ("stride_oh", ctypes.c_longlong)]


class LaunchAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_byte * 64)]


class LaunchConfig(ctypes.Structure):
    _fields_ = [("gridDimX", ctypes.c_uint), ("gridDimY", ctypes.c_uint), ("gridDimZ", ctypes.c_uint),
                ("blockDimX", ctypes.c_uint), ("blockDimY", ctypes.c_uint), ("blockDimZ", ctypes.c_uint),
                ("sharedMemBytes", ctypes.c_uint), ("hStream", ctypes.c_void_p),
                ("attrs", ctypes.POINTER(LaunchAttr)), ("numAttrs", ctypes.c_uint)]


class CudaKernel:
    """One of the cubin's kernels, launched on torch's current stream (captured by CUDA graphs)."""

    CLUSTER_DIMENSION = 4  # CUlaunchAttributeID
    PROGRAMMATIC_STREAM_SERIALIZATION = 6
    MAX_DYNAMIC_SHARED = 8  # CUfunction_attribute
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14

    def __init__(self, cubins: Path, spec: Spec, pdl: bool = True, fallback: CudaKernel | None = None) -> None:
        cubin = cubins / f"mla_decode_s{spec.stages}.cubin"
        self.smem = spec.smem or smem_bytes(spec.stages)  # ``smem``: a kernel with a layout of its own (``_k64``)
        self.cu = ctypes.CDLL("libcuda.so.1")
        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the primary context, current on this thread
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self._check(self.cu.cuModuleLoad(ctypes.byref(self.mod), str(cubin).encode()), "cuModuleLoad")
        self._check(self.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, spec.entry.encode()),
                    "cuModuleGetFunction")
        self._check(self.cu.cuFuncSetAttribute(self.fn, self.MAX_DYNAMIC_SHARED, self.smem), "cuFuncSetAttribute")
        self.cluster = spec.fallback is not None
        if self.cluster:
            self._check(self.cu.cuFuncSetAttribute(self.fn, self.NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
                        "cuFuncSetAttribute (non-portable cluster size)")
        self.pdl, self.threads, self.fallback = pdl, spec.threads, fallback
        self.keep: list[Any] = []

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"{what} failed: CUresult {rc}")

    def _config(self, splits: int, bsz: int, pdl: bool) -> tuple[LaunchConfig, Any]:
        """The launch of ``splits x bsz`` programs (a cluster a request for ``_cl``), and its attributes."""
        attrs = []
        if pdl:
            a = LaunchAttr(id=self.PROGRAMMATIC_STREAM_SERIALIZATION)
            a.value[0] = 1
            attrs.append(a)
        if self.cluster:
            a = LaunchAttr(id=self.CLUSTER_DIMENSION)
            ctypes.memmove(ctypes.addressof(a.value), struct.pack("3I", splits, 1, 1), 12)
            attrs.append(a)
        arr = (LaunchAttr * max(len(attrs), 1))(*attrs)
        cfg = LaunchConfig(splits, bsz, 1, self.threads, 1, 1, self.smem, torch.cuda.current_stream().cuda_stream,
                           ctypes.cast(arr, ctypes.POINTER(LaunchAttr)) if attrs else None, len(attrs))
        return cfg, arr

    def max_active_clusters(self, splits: int, bsz: int) -> int:
        """How many of this kernel's ``splits``-CTA clusters the GPU holds at once (a request's splits make one; a
        batch with more requests than this runs its clusters in waves)."""
        cfg, arr = self._config(splits, bsz, pdl=False)
        n = ctypes.c_int()
        self._check(self.cu.cuOccupancyMaxActiveClusters(ctypes.byref(n), self.fn, ctypes.byref(cfg)),
                    "cuOccupancyMaxActiveClusters")
        return n.value

    def __call__(self, q: torch.Tensor, k_pool: torch.Tensor, out: torch.Tensor, req_to_token: torch.Tensor,
                 req_pool_indices: torch.Tensor, seq_lens: torch.Tensor, tree_mask: torch.Tensor | None,
                 mid_o: torch.Tensor, mid_lse: torch.Tensor, stride: int, num_splits: int, scale: float, cfg: Any,
                 dot_f32: bool, early_metadata: bool = False, merge_max_programs: int = 0) -> None:
        """``early_metadata``: the Triton kernel's; ignored (these kernels read theirs before the wait as written).
        ``merge_max_programs``: the merge launch's grid cap, as the Triton kernel's."""
        from updraft.attention.triton_kernels.merge import merge_splits

        if self.cluster and num_splits > MAX_CLUSTER:
            assert self.fallback is not None  # splits that make no cluster: the form with the merge launch
            return self.fallback(q, k_pool, out, req_to_token, req_pool_indices, seq_lens, tree_mask, mid_o, mid_lse,
                                 stride, num_splits, scale, cfg, dot_f32, merge_max_programs=merge_max_programs)
        bsz = seq_lens.shape[0]
        assert stride == 1 and tree_mask is None and q.shape[1:] == (HEADS, RANK + ROPE)
        if mid_o.shape != (bsz, HEADS, num_splits, RANK):  # one split: the backend passes no partial buffers
            mid_o = torch.empty(bsz, HEADS, num_splits, RANK, dtype=torch.float32, device=q.device)
            mid_lse = torch.empty(bsz, HEADS, num_splits, dtype=torch.float32, device=q.device)
        assert q.dtype == k_pool.dtype == out.dtype == torch.bfloat16 and k_pool.stride(0) == RANK + ROPE
        assert q.stride(2) == 1 and out.stride(2) == 1
        assert req_to_token.dtype == torch.int32 and seq_lens.dtype == torch.int32
        rpi = req_pool_indices if req_pool_indices.dtype == torch.int64 else req_pool_indices.long()
        p = Params(q.data_ptr(), k_pool.data_ptr(), mid_o.data_ptr(), mid_lse.data_ptr(), req_to_token.data_ptr(),
                   rpi.data_ptr(), seq_lens.data_ptr(), q.stride(0), q.stride(1), k_pool.stride(0),
                   req_to_token.stride(0), mid_o.stride(0), mid_o.stride(1), mid_o.stride(2), mid_lse.stride(0),
                   mid_lse.stride(1), num_splits, cfg.min_split, cfg.block_n, scale * 1.4426950408889634,
                   out.data_ptr(), out.stride(0), out.stride(1))
        cfg_, attrs = self._config(num_splits, bsz, self.pdl)
        # alive until the launch is enqueued (graph capture copies the parameters)
        self.keep = [p, rpi, mid_o, mid_lse, attrs]
        args = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(p), ctypes.c_void_p))
        self._check(self.cu.cuLaunchKernelEx(ctypes.byref(cfg_), self.fn, args, None), "cuLaunchKernelEx")
        if not self.cluster:
            merge_splits(mid_o, mid_lse, out, written=True, max_programs=merge_max_programs)


def variant(cubins: Path, name: str) -> CudaKernel:
    """The CUDA variant ``name`` (a ``KERNELS`` key, ``_nopdl`` for its launch without PDL) from ``cubins``."""
    spec, pdl = KERNELS[name.removesuffix("_nopdl")], not name.endswith("_nopdl")
    fallback = CudaKernel(cubins, KERNELS[spec.fallback], pdl) if spec.fallback else None
    return CudaKernel(cubins, spec, pdl, fallback)


def ptxas_summary(log: str) -> str:
    """``ptxas -v``'s report as ``entry registers`` pairs (with the spill line where a kernel spills)."""
    parts, entry = [], ""
    for line in log.splitlines():
        if "Compiling entry function" in line:
            entry = line.split("'")[1].removeprefix("mla_decode_")
        elif "Used" in line and "registers" in line:
            parts.append(f"{entry} {line.split('Used')[1].split('registers')[0].strip()}")
        elif "spill" in line and not line.strip().startswith("0 bytes stack frame, 0 bytes spill stores"):
            parts.append(f"{entry} SPILLS ({line.strip()})")
    return ", ".join(parts) + " registers"


def compile_cubin(stage_counts: Iterable[int]) -> Path:
    """The .cu built once for each of ``stage_counts`` (nvcc takes a while: only those the variants use), into a
    folder holding ``mla_decode_s{N}.cubin``."""
    out = Path(tempfile.mkdtemp())
    for stages in sorted(set(stage_counts)):
        cmd = ["nvcc", "-cubin", "-arch=sm_90a", "-O3", f"-DSTAGES={stages}", "-Xptxas", "-v", str(SOURCE), "-o",
               str(out / f"mla_decode_s{stages}.cubin")]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"nvcc failed:\n{res.stderr[-3000:]}")
        print(f"STAGES={stages}: " + ptxas_summary(res.stderr))
    return out


def same_inputs(kernel: CudaKernel, bs: int, ctx: int, device: torch.device,
                splits: int | None = None) -> dict[str, float]:
    """Both kernels (and their merges) over one set of inputs: the largest difference of the outputs."""
    from updraft.attention.triton_kernels import mla_decode
    from updraft.batch import ForwardMode, make_forward_batch

    gen = torch.Generator(device=device).manual_seed(7 + bs + ctx)
    st = mla_bench.LatentSetup(bs, ctx, HEADS, RANK, ROPE, 1, device, gen)
    be = st.backend
    batch = make_forward_batch(ForwardMode.DECODE, torch.zeros(bs, dtype=torch.long, device=device), st.rows,
                               torch.full((bs,), ctx, dtype=torch.int32), torch.full((bs,), 1, dtype=torch.int32),
                               st.table, logits="none", stride=1)
    q = torch.randn(bs, HEADS, RANK + ROPE, device=device, generator=gen).to(torch.bfloat16)
    batch.attn_backend = be
    be.kv_splits_override = splits
    be.init_forward_metadata(batch)
    md = batch.attn_metadata
    outs = []
    for fn in (mla_decode.mla_decode_attention, kernel):
        out = torch.empty(bs, HEADS, RANK, dtype=torch.bfloat16, device=device)
        md.mid_o.fill_(float("nan"))
        fn(q, be.kv_pool.k_buffer[0], out, be.req_to_token, md.req_pool_indices, md.seq_lens, None, md.mid_o,
           md.mid_lse, 1, md.plan.num_kv_splits, be.scale, md.plan.tile, False)
        outs.append(out.float())
    ref = torch.cat([mla_bench.reference(q[i:i + 1], st.latent(i, ctx), RANK, be.scale, 1) for i in range(bs)])
    d = (outs[0] - outs[1]).abs()
    return {"max_abs_diff_triton_cuda": d.max().item(), "rel_err_triton": mla_bench.rel_err(outs[0], ref),
            "rel_err_cuda": mla_bench.rel_err(outs[1], ref), "splits": md.plan.num_kv_splits,
            # where a wrong fragment mapping would show: per head, per 64-column block
            "by_head": [round(v, 4) for v in d.amax(dim=(0, 2)).tolist()],
            "by_cols64": [round(v, 4) for v in d.view(bs, HEADS, RANK // 64, 64).amax(dim=(0, 1, 3)).tolist()]}


def save(out: Path, device: torch.device, peak_tbps: float, checks: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "mla_cuda_probe.json").write_text(json.dumps(
        {"meta": meta(device), "peak_tbps": peak_tbps, "checks": checks, "rows": rows}, indent=1))


def check_child(spec: str, shapes: list[tuple[int, ...]], device: torch.device) -> int:
    """``--check-one NAME@CUBIN``, in a child process: one CUDA variant against the reference on a short
    shape and the timed ones, and its cluster occupancy, printed as one ``CHECKS`` JSON line."""
    n, cubin = spec.split("@")[0], Path(spec.split("@")[1])
    base, splits = split_name(n)
    kernel = variant(cubin, base)
    short = [] if splits else [(2, 100)]  # a forced split count: the timed shapes only (no empty splits)
    got: dict[str, Any] = {f"{n} {bs}x{ctx}": same_inputs(kernel, bs, ctx, device, splits)
                           for bs, ctx in short + shapes}
    if kernel.cluster:  # more requests than this at that many splits: the clusters run in waves
        for size in (MAX_CLUSTER, 14, 12, 8):
            got[f"{n} max active {size}-CTA clusters"] = kernel.max_active_clusters(size, 8)
    print("CHECKS " + json.dumps(got))
    return 0


def checked_variants(cuda_names: list[str], cubin: Path, out: Path, shapes: str) -> tuple[dict[str, Any], list[str]]:
    """Each CUDA variant checked in a child process of its own: the checks, and the names that passed."""
    checks: dict[str, Any] = {}
    passed = []
    for n in cuda_names:
        try:  # a hung launch (a cluster barrier some CTA never reaches) costs this much device time, not the call
            res = subprocess.run([sys.executable, __file__, "--out", str(out), "--shapes", shapes,
                                  "--check-one", f"{n}@{cubin}"], capture_output=True, text=True, timeout=120)
            log, rc = res.stdout + res.stderr, res.returncode
        except subprocess.TimeoutExpired:
            log, rc = "the check did not end within 120 s", -1
        line = next((ln for ln in log.splitlines() if ln.startswith("CHECKS ")), None)
        if rc != 0 or line is None:
            checks[n] = {"failed": log[-1500:]}
            print(f"check {n}: FAILED, left out of the timing\n{log[-800:]}")
            continue
        checks.update(json.loads(line.removeprefix("CHECKS ")))
        passed.append(n)
    return checks, passed


def print_medians(rows: list[dict[str, Any]], shapes: list[tuple[int, ...]], sides: list[str],
                  names: list[str]) -> None:
    print("\nmedian us (share of the copy bandwidth; 'latent': the layer's latent-rows kernel before the attention):")
    for (bs, ctx), side in ((shape, side) for shape in shapes for side in sides):
        line = []
        for name in names:
            got = [r for r in rows if r["kernel"] == name and r["bs"] == bs and r["context"] == ctx and r["side"] == side]
            ts, fr = sorted(r["time_us"] for r in got), sorted(r["fraction_of_peak"] for r in got)
            line.append(f"{name} {ts[len(ts) // 2]:.1f} ({fr[len(fr) // 2]:.1%})")
        print(f"  {side} bs {bs} / {ctx}: " + " | ".join(line))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shapes", default="8x8192,8x32768,64x8192,64x32768", help="bs x context, comma-separated")
    ap.add_argument("--sides", default="stored,latent",
                    help="mla_bench model sides: 'stored' (the issue's measure), 'latent' (the latent-rows kernel first)")
    ap.add_argument("--kernels", default="cuda_k64,cuda_k64_cl,cuda_a3ln_cl",
                    help=f"CUDA variants beside Triton ('': none): {', '.join(KERNELS)}, each also with _nopdl (launched "
                         "without PDL), or triton_plain / triton_capN (N 25, 50, 100); any of them, or triton, also with :S (at S KV splits, not the "
                         "backend's policy)")
    ap.add_argument("--check-one", default="", help=argparse.SUPPRESS)  # a child process: one variant's checks
    args = ap.parse_args()
    device = torch.device("cuda")
    from updraft.attention import mla_backend

    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    if args.check_one:  # a kernel that traps (a lost bulk copy) takes only this process with it
        return check_child(args.check_one, shapes, device)
    wanted = [n for n in args.kernels.split(",") if n]
    try:
        bases = {n: split_name(n) for n in wanted}
    except ValueError as e:
        ap.error(str(e))
    unknown = [n for n, (b, _) in bases.items() if b.removesuffix("_nopdl") not in KERNELS and b not in TRITON_FORMS]
    if unknown:
        ap.error(f"--kernels: unknown {', '.join(unknown)}; allowed: {', '.join(KERNELS)} (each also with _nopdl), "
                 "or triton / triton_plain, each also with :S (S KV splits)")
    cuda_names = [n for n in wanted if bases[n][0] not in TRITON_FORMS]
    cubin = compile_cubin(stages_of(bases[n][0]) for n in cuda_names) if cuda_names else Path()
    checks, passed = checked_variants(cuda_names, cubin, args.out, args.shapes)
    names = [n for n in wanted if bases[n][0] in TRITON_FORMS] + passed
    for k, v in checks.items():
        print(f"check {k}: {v}")
    kernels = {n: variant(cubin, bases[n][0]) for n in names if bases[n][0] not in TRITON_FORMS}
    bargs = mla_bench.parse_args(["--repeats", "20"])
    bargs.peak_tbps = round(copy_tbps(device), 3)
    triton_fn = mla_backend.mla_decode_attention
    early_default = mla_backend.MLABackend.decode_early_metadata
    cap_default = mla_backend.MLABackend.merge_pdl_grid
    sides = args.sides.split(",")
    rows = []
    for rnd in range(args.rounds):
        for name in ["triton", *names]:
            mla_backend.mla_decode_attention = kernels.get(name, triton_fn)  # type: ignore[assignment]
            mla_backend.MLABackend.decode_early_metadata = (  # type: ignore[misc]
                early_default and not (name in bases and bases[name][0] == "triton_plain"))
            cap = bases[name][0].removeprefix("triton_cap") if name in bases else ""
            mla_backend.MLABackend.merge_pdl_grid = int(cap) / 100 if cap.isdigit() else cap_default  # type: ignore[misc]
            splits = bases[name][1] if name in bases else None  # the default "triton": the policy's splits
            try:
                for (bs, ctx), side in ((shape, side) for shape in shapes for side in sides):
                    r = mla_bench.bench(bs, ctx, HEADS, bargs, device, (RANK, ROPE), 1,
                                        mla_bench.Variant(model_side=side, splits=splits))
                    r.update(kernel=name, round=rnd, side=side)
                    rows.append(r)
                    print(f"round {rnd} {name:18s} {side:6s} bs {bs:2d} ctx {ctx:5d}: {r['time_us']:7.1f} us  "
                          f"{r['fraction_of_peak']:.1%} of {bargs.peak_tbps} TB/s  rel err {r['rel_err_req0']:.1e}")
            except Exception as e:  # a launcher or shape error: that variant reported and left out, the rest timed
                if name == "triton":
                    raise
                print(f"round {rnd} {name}: FAILED ({type(e).__name__}: {e}), left out")
                names.remove(name)
            finally:
                mla_backend.mla_decode_attention = triton_fn  # type: ignore[assignment]
                mla_backend.MLABackend.decode_early_metadata = early_default  # type: ignore[misc]
                mla_backend.MLABackend.merge_pdl_grid = cap_default  # type: ignore[misc]
            torch.cuda.empty_cache()
        save(args.out, device, bargs.peak_tbps, checks, rows)  # each round kept, should a time limit cut the run
    print_medians(rows, shapes, sides, ["triton", *names])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
