"""``benchmarks/mla_cuda_probe.py`` (GPU script): what the CPU can check of it."""

from __future__ import annotations

import inspect

import pytest


def test_cuda_launcher_takes_the_triton_launchers_arguments(load_benchmark) -> None:
    """The probe swaps its CUDA launcher in for ``mla_decode_attention`` inside ``MLABackend``: a parameter the
    backend passes and the launcher lacks kills the timing on the GPU (a run on 2026-12-06 lost its CUDA variants
    to a ``prewarm_rows`` keyword), so the two signatures must name the same parameters in the same order."""
    probe = load_benchmark("mla_cuda_probe")
    from updraft.attention.triton_kernels.mla_decode import mla_decode_attention

    launcher = list(inspect.signature(probe.CudaKernel.__call__).parameters)[1:]  # without self
    assert launcher == list(inspect.signature(mla_decode_attention).parameters)


def test_each_variant_names_an_entry_point_of_its_thread_count(load_benchmark) -> None:
    """A ``KERNELS`` entry whose kernel is missing from the .cu fails only on the GPU (``cuModuleGetFunction``), and
    one launched on more threads than its ``__launch_bounds__`` fails the launch: both checked here on the source."""
    import re

    probe = load_benchmark("mla_cuda_probe")
    source = "".join(f.read_text() for f in sorted(probe.SOURCE.parent.glob("*.cu*")))  # the .cu and its headers
    bounds = {name: int(threads) for threads, name in
              re.findall(r'extern "C" __global__ void __launch_bounds__\((\d+), 1\) (\w+)\(', source)}
    assert set(bounds) == {spec[0] for spec in probe.KERNELS.values()}
    for variant, (entry, threads, *_) in probe.KERNELS.items():
        assert bounds.get(entry) == threads, (variant, entry, threads, bounds.get(entry))


def test_fragment_mappings_compute_the_products(load_benchmark) -> None:
    """``cuda/fragments.py`` re-states the .cu's lane addresses and register use (``ldmatrix``, ``mma.m16n8k16``,
    the 64-key kernel's swizzled score buffer) in numpy: each warp layout's QK and PV products must be numpy's."""
    import numpy as np

    frag = load_benchmark("cuda/fragments")
    rng = np.random.default_rng(1)
    q = rng.standard_normal((frag.H, frag.D))
    for keys, nws in ((frag.BN, (4, 8)), (64, (8,))):
        k, p = rng.standard_normal((keys, frag.D)), rng.standard_normal((frag.H, keys))
        tile = np.zeros((keys, frag.ROWP))
        tile[:, :frag.D] = k
        flat = tile.reshape(-1)
        for nw in nws:
            scores = frag.qk(q, flat, nw) if keys == frag.BN else frag.qk64(q, flat)
            out = frag.pv(p, flat, nw) if keys == frag.BN else frag.pv64(p, flat)
            np.testing.assert_allclose(scores, q @ k.T, atol=1e-10)
            np.testing.assert_allclose(out, p @ k[:, :frag.DV], atol=1e-10)


def test_ptxas_summary_names_registers_and_spills(load_benchmark) -> None:
    probe = load_benchmark("mla_cuda_probe")
    log = """ptxas info    : Compiling entry function 'mla_decode_h16_k64' for 'sm_90a'
ptxas info    : Function properties for mla_decode_h16_k64
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 240 registers, used 1 barriers
ptxas info    : Compiling entry function 'mla_decode_h16' for 'sm_90a'
ptxas info    : Function properties for mla_decode_h16
    8 bytes stack frame, 12 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers"""
    got = probe.ptxas_summary(log)
    assert got.startswith("h16_k64 240, h16 SPILLS (8 bytes stack frame, 12 bytes spill stores")
    assert got.endswith("h16 255 registers")


def test_only_the_variants_stage_counts_are_built(load_benchmark) -> None:
    """nvcc runs once for each STAGES the requested variants use (device time: the probe's first call builds one)."""
    probe = load_benchmark("mla_cuda_probe")
    assert probe.stages_of("cuda_k64") == 4 and probe.stages_of("cuda_s5_nopdl") == 5
    assert {probe.stages_of(n) for n in probe.KERNELS} == {4, 5}


def test_launch_parameters_match_the_kernels_struct(load_benchmark) -> None:
    """The launcher passes ``Params`` by pointer as the kernels' ``struct Params`` (``cuda/mla_common.cuh``): a field
    missing, moved or of another width on one side shifts every field after it, which only the GPU would show (as
    wrong outputs or a fault). Names, order and C types checked here on the source."""
    import ctypes
    import re

    probe = load_benchmark("mla_cuda_probe")
    source = (probe.SOURCE.parent / "mla_common.cuh").read_text()
    body = re.search(r"struct Params \{(.*?)\};", source, re.S).group(1)
    declared = []
    for decl in body.split(";"):
        decl = re.sub(r"//[^\n]*", "", decl).strip()
        if not decl:
            continue
        ctype = "pointer" if "*" in decl else re.match(r"(long long|int|float)\b", decl).group(1)
        names = re.sub(r"^(const\s+)?[\w:]+(\s+long)?\s*\**", "", decl)
        declared += [(n.strip().lstrip("*"), ctype) for n in names.split(",")]
    width = {"pointer": ctypes.c_void_p, "long long": ctypes.c_longlong, "int": ctypes.c_int, "float": ctypes.c_float}
    assert [(n, width[t]) for n, t in declared] == list(probe.Params._fields_)
    assert {"out", "stride_ot", "stride_oh"} <= {n for n, _ in declared}  # the cluster forms' output


def test_cluster_merge_indexing_merges_the_splits(load_benchmark) -> None:
    """``cuda/fragments.py``'s ``cluster_merge`` re-states the ``_cl`` kernels' shared-memory layout and each CTA's
    share of the merge (weights, four-column groups): at cluster sizes that divide the groups and that do not, on 4 warps
    and 8, with splits that saw no key (lse -inf, zero partial), it must give the log-sum-exp merge."""
    import numpy as np

    frag = load_benchmark("cuda/fragments")
    rng = np.random.default_rng(2)
    for splits in (1, 2, 3, 4, 8, 12, 14, 16):  # sizes that divide the 2048 groups and sizes that do not
        parts = rng.standard_normal((splits, frag.H, frag.DV))
        lses = rng.uniform(-4, 4, (splits, frag.H))
        if splits > 1:
            lses[-1] = -np.inf  # a trailing split past the context
            parts[-1] = 0.0
        w = np.exp2(lses - lses.max(axis=0))
        want = (w[:, :, None] * parts).sum(0) / w.sum(0)[:, None]
        for nw in (4, 8):
            np.testing.assert_allclose(frag.cluster_merge(parts, lses, nw), want, atol=1e-12)


def test_a_split_suffix_names_the_variant_and_its_splits(load_benchmark) -> None:
    probe = load_benchmark("mla_cuda_probe")
    assert probe.split_name("cuda_a3ln_cl:8") == ("cuda_a3ln_cl", 8)
    assert probe.split_name("triton") == probe.split_name("triton:") == ("triton", None)
    for bad in ("cuda:0", "cuda:x", "cuda:-2"):
        with pytest.raises(ValueError, match="positive integer"):
            probe.split_name(bad)
