"""The attention matrix: the quick CPU matrix through the CLI's own code path (fails on any failure
not listed in docs/KNOWN_FAILURES.md), plus the pieces that decide a cell's text and the exit
status, and the runner modes' reach (what graph-metadata cannot see and graph can)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from updraft.attention.torch_native import TorchNativeBackend
from updraft.batch import ForwardMode
from updraft.kit import report
from updraft.kit.cases import TIERS, AttnCase, eager_cases, graph_cases
from updraft.kit.cli import kit_main
from updraft.kit.graph_harness import run_graph, run_graph_metadata
from updraft.kit.matrix import (
    ATTN_MODES,
    PRODUCTION,
    Cell,
    Column,
    MatrixResult,
    apply_known,
    case_families,
    cell_applicability,
    hardware_skip,
    plan_units,
    run_matrix,
    select_columns,
)

M = ForwardMode
REPO = Path(__file__).resolve().parents[2]


def _quick_cpu(tmp_path: Path, name: str, *args: str) -> tuple[str, dict[str, str]]:
    """``updraft kit run --quick --device cpu`` (2 worker processes) with ``args``: the report's
    text and its rows by backend; fails on any failure not in docs/KNOWN_FAILURES.md."""
    out = tmp_path / f"{name}.md"
    rc = kit_main(["run", "--quick", "--device", "cpu", "--jobs", "2", "--no-progress", "--out", str(out),
                   "--known", str(REPO / "docs" / "KNOWN_FAILURES.md"), *args])
    text = out.read_text()
    assert rc == 0, text[text.find("## Failures") :][:2000]
    rows = {line.split("|")[1].strip(): line for line in text.splitlines() if line.startswith("| ") and "✓" in line}
    for key in ("device", "torch", "triton", "commit", "date", "command"):
        assert f"| {key} |" in text
    return text, rows


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")[1:]]


def test_quick_cpu_matrix_has_no_unlisted_failure(tmp_path: Path) -> None:
    """What CI runs: every backend's attention cells of the quick tier (eager, graph-metadata,
    graph: 18 columns), and torch_native's production columns. Triton's production columns
    (the engine's runners over interpreted kernels: ~10 minutes of the 2-core CI machine) are
    the slow test below, and run compiled on the GPU."""
    text, rows = _quick_cpu(tmp_path, "attention", "--runner", "eager", "--runner", "graph-metadata", "--runner", "graph")
    assert set(rows) == {"torch_native", "triton", "flex", "mla"}
    header = next(line for line in text.splitlines() if line.startswith("| backend |"))
    assert header.count("|") == 1 + 1 + len(ATTN_MODES) * 3
    for backend, line in rows.items():
        cells = _cells(line)
        assert all(re.match(r"^(✓ \(\d+\)|— \[\d+\]|skip: hardware \[\d+\])$", c) for c in cells), cells
        if backend in ("triton", "mla"):
            assert all(c.startswith("✓") for c in cells), (backend, cells)  # every mode x runner ran
    text, rows = _quick_cpu(tmp_path, "production", "--runner", "production", "--backend", "torch_native")
    cells = _cells(rows["torch_native"])
    assert len(cells) == len(PRODUCTION) and sum(c.startswith("✓") for c in cells) == len(PRODUCTION) - 1, cells
    assert cells[-1].startswith("✓")  # the fused iteration ran


@pytest.mark.slow
def test_quick_cpu_matrix_production_runners_on_triton(tmp_path: Path) -> None:
    """Triton's production columns of the quick tier under the interpreter, every one passing."""
    _, rows = _quick_cpu(tmp_path, "triton-production", "--runner", "production", "--backend", "triton")
    cells = _cells(rows["triton"])
    assert len(cells) == len(PRODUCTION) and all(c.startswith("✓") for c in cells), cells


def test_eager_failure_is_reported_with_its_first_case(monkeypatch: pytest.MonkeyPatch) -> None:
    real = TorchNativeBackend.forward_decode

    def off(self, q, k, v, layer_id, batch, *, save_kv=True):  # noqa: ANN001, ANN202
        out = real(self, q, k, v, layer_id, batch, save_kv=save_kv)
        return out + (batch.seq_lens_cpu.max() > 16).float()  # wrong only for longer contexts

    monkeypatch.setattr(TorchNativeBackend, "forward_decode", off)
    res = run_matrix(["torch_native"], select_columns(["DECODE"], ["eager"]), "cpu", "quick", jobs=1, progress=False)
    cell = res.cell("torch_native", "DECODE eager")
    assert cell.status == "fail" and 0 < cell.passed < cell.total
    assert cell.first_failure.startswith("DECODE-") and "rel_err" in cell.first_failure
    assert res.regressions() == [cell]
    text = report.render(res, {"device": "cpu"}, [])
    assert f"✗ {cell.total - cell.passed}/{cell.total} [F1]" in text and "regression" in text


def test_known_failures_decide_the_exit_status(tmp_path: Path) -> None:
    known_md = tmp_path / "KNOWN_FAILURES.md"
    known_md.write_text(
        "intro\n\n| backend | device | column | status | root cause |\n|---|---|---|---|---|\n"
        "| (none) | | | | placeholder |\n| triton | cpu | DECODE graph | ✗ | interpreter limit |\n"
        "| * | cuda | * | blocked | no GPU here |\n| triton | any | DECODE eager | ✗ | fixed since |\n"
    )
    known = report.load_known(known_md)
    assert [(k.backend, k.device, k.column) for k in known] == [
        ("triton", "cpu", "DECODE graph"), ("*", "cuda", "*"), ("triton", "any", "DECODE eager")]
    cols = [Column("DECODE eager", "eager", M.DECODE), Column("DECODE graph", "graph", M.DECODE), Column("verify", "production")]
    cells = {
        ("triton", "DECODE eager"): Cell("triton", "DECODE eager", "pass", 3, 3),
        ("triton", "DECODE graph"): Cell("triton", "DECODE graph", "fail", 1, 2, "case x"),
        ("triton", "verify"): Cell("triton", "verify", "blocked", reason="set-up raised"),
    }
    res = MatrixResult("cpu", "quick", ["triton"], cols, cells)
    stale = apply_known(res, known)
    assert cells[("triton", "DECODE graph")].known == "interpreter limit"
    assert [c.column for c in res.regressions()] == ["verify"]  # the cuda row does not match cpu
    assert [k.root_cause for k in stale] == ["fixed since"]  # cuda rows are not "stale" on cpu
    text = report.render(res, {"device": "cpu"}, stale)
    assert "✗ 1/2 [F1 known]" in text and "blocked: set-up raised [F2]" in text
    assert "Known failures that did not fail here" in text
    bad = tmp_path / "bad.md"
    bad.write_text("| backend | column |\n|---|---|\n| triton | x |\n")
    with pytest.raises(ValueError, match="columns"):
        report.load_known(bad)


def test_repo_known_failures_file_parses() -> None:
    report.load_known(REPO / "docs" / "KNOWN_FAILURES.md")


def test_triton_without_interpreter_is_a_hardware_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    import updraft.attention.triton_kernels as tk

    monkeypatch.setattr(tk, "interpreting", lambda: False)
    assert "TRITON_INTERPRET" in hardware_skip("triton", "cpu")
    res = run_matrix(["triton"], select_columns(["DECODE"], ["eager"]), "cpu", "quick", jobs=1, progress=False)
    cell = res.cell("triton", "DECODE eager")
    assert cell.status == "skip" and not cell.failing
    assert report.cell_text(cell, {}, []) == "skip: hardware [1]"


def test_columns_and_no_graph_paths() -> None:
    cols = select_columns(["DRAFT_EXTEND", "verify"], None)
    assert [c.key for c in cols] == ["DRAFT_EXTEND eager", "DRAFT_EXTEND graph-metadata", "DRAFT_EXTEND graph", "verify"]
    with pytest.raises(ValueError, match="unknown mode"):
        select_columns(["PREFILL"], None)
    res = run_matrix(["torch_native", "flex"], select_columns(["EXTEND", "draft extend v1"], ["graph", "production"]),
                     "cpu", "quick", jobs=1, progress=False)
    assert {c.status for c in res.cells.values()} == {"none"}  # prefill, and v1 / flex graphs
    assert "host" in res.cell("torch_native", "draft extend v1").reason
    assert "never captured" in res.cell("flex", "EXTEND graph").reason
    assert "graph_modes is empty" in res.cell("flex", "draft extend v1").reason


def test_fused_iteration_column_is_a_unit_of_its_own() -> None:
    """It runs on an engine of its own (beside the other v2 columns' engine), and only where
    the backend captures every phase its graph holds."""
    cols = select_columns(["verify", "fused iteration"], ["production"])
    units = list(plan_units(["torch_native", "flex"], cols, "cpu", "quick"))
    assert [(u.backend, u.columns, u.weight) for u in units] == [
        ("torch_native", ("verify",), 3), ("torch_native", ("fused iteration",), 6)]
    status, reason = cell_applicability("flex", Column("fused iteration", "production"), "cpu")
    assert status == "none" and "graph_modes is empty" in reason


def test_case_tiers_cover_the_sweep_dimensions() -> None:
    for tier in TIERS:
        for mode in ATTN_MODES:
            eager, graph = eager_cases(mode, tier), graph_cases(mode, tier)
            for cases in (eager, graph):
                assert any(c.table_slack == 0 for c in cases)  # a request at exactly the table width
                assert {c.page_size for c in cases} == {1, 16}
                assert not any(c.tree for c in graph)
            assert {c.dtype for c in eager} == {"float32", "bfloat16"}
            assert {c.layout for c in eager} >= ({"shuffled", "interleaved"} if tier == "quick" else {"contiguous", "shuffled", "interleaved", "nonmonotonic"})
            assert {(c.num_heads, c.num_kv_heads) for c in eager} == {(8, 2), (4, 1), (4, 4)}
            assert any(c.batch_size >= 3 for c in eager) and any(c.prefix_lens == (0,) for c in eager)
        assert any(c.tree for c in eager_cases(M.TARGET_VERIFY, tier))


def test_mla_family_cases_and_cells() -> None:
    """Backends run the head families they serve; MLA cases are shared latent caches at both
    dtypes and page sizes, the full tier adds the real 512 + 64 widths; the production runners
    (a Llama engine) have no mla cells."""
    assert case_families("mla") == ("mla",) and case_families("torch_native") == ("standard", "mla")
    assert case_families("triton") == ("standard",)
    for tier in TIERS:
        for mode in ATTN_MODES:
            cases = eager_cases(mode, tier, "mla") + graph_cases(mode, tier, "mla")
            assert all(c.shared_kv and c.num_kv_heads == 1 and c.dv < c.head_dim for c in cases)
            assert {c.dtype for c in cases} == {"float32", "bfloat16"} and {c.page_size for c in cases} == {1, 16}
            assert any(c.table_slack == 0 for c in cases)
            real = [c for c in cases if (c.head_dim, c.dv, c.num_heads) == (576, 512, 16)]
            assert bool(real) == (tier == "full"), (tier, mode)
    assert any(c.tree for c in eager_cases(M.TARGET_VERIFY, "quick", "mla"))
    status, reason = cell_applicability("mla", Column("verify", "production"), "cpu")
    assert status == "none" and "latent" in reason
    with pytest.raises(ValueError, match="family"):
        eager_cases(M.DECODE, "quick", "latent")


def test_graph_metadata_cannot_see_a_rebound_buffer_but_graph_can(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failure class 6: a replay-init that builds new tensors is right for an eager forward over
    the static buffers, and wrong for a captured graph (which keeps reading the old ones)."""
    from updraft.attention import torch_native as tn

    def rebinds(self, batch):  # noqa: ANN001, ANN202
        md = batch.attn_metadata
        batch.attn_metadata = tn.build_metadata(batch, self.req_to_token, md.max_q, md.max_kv)

    monkeypatch.setattr(TorchNativeBackend, "init_replay_metadata", rebinds)
    case = AttnCase(M.DECODE, 8, 2, 16, 1, (9, 30), (1, 1), "float32", "shuffled")
    assert run_graph_metadata("torch_native", case, 2, "fill").ok
    assert not run_graph("torch_native", case, 2, "fill").ok


def test_stale_static_inputs_are_poisoned(monkeypatch: pytest.MonkeyPatch) -> None:
    """Failure class 10: a builder that leaves the padded tokens' rows and positions from an
    earlier batch gathers real KV slots for them (the harness poisons static inputs with stale
    values first; on a CPU the builder writes the static inputs in place)."""
    from updraft.runtime.phase_inputs import PhaseInputs

    real_write = PhaseInputs.write

    def leaky(self, token_ids, rows, seq_lens, extend_lens, logits, **kw):  # noqa: ANN001, ANN003, ANN202
        keep = self.i64.clone()
        staged = real_write(self, token_ids, rows, seq_lens, extend_lens, logits, **kw)
        t_real, t = sum(extend_lens), staged.tokens
        for view, old in ((self.token_rows, keep[2 * self.max_tokens : 3 * self.max_tokens]),
                          (self.positions, keep[self.max_tokens : 2 * self.max_tokens])):
            view[t_real:t].copy_(old[t_real:t])  # the bug: padded tokens not cleared
        return staged

    monkeypatch.setattr(PhaseInputs, "write", leaky)
    case = AttnCase(M.TARGET_VERIFY, 4, 2, 16, 1, (9, 3), (4, 4), "float32", "shuffled")
    r = run_graph_metadata("torch_native", case, 2, "fill")
    assert not r.ok and "pool slots" in r.kv_error
    assert torch.isfinite(torch.tensor(r.rel_err_ref))
