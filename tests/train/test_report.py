"""What a run reports of its final engine check (``updraft.train.report``): a check the time
budget cut says so, and one cut before its first verify step gives no accept length at all."""

from __future__ import annotations

from updraft.train.report import engine_check_text, write_model_card


def _check(**kw: object) -> dict[str, object]:
    return {"prompts": 16, "max_tokens": 192, "mean_accept_length": 3.27, "per_position": [0.72, 0.571],
            "verify_steps": 900, "cut_at_deadline": False} | kw


def test_a_whole_check_gives_its_figures() -> None:
    assert engine_check_text(_check()) == "mean accept length 3.27, per position [0.72, 0.571]"


def test_a_check_cut_before_any_verify_step_has_no_figure() -> None:
    # what the H200 run of 2026-12-04 (run M, step 19,209) reported as "mean accept length 0.00"
    text = engine_check_text(_check(mean_accept_length=0.0, per_position=[], verify_steps=0, cut_at_deadline=True))
    assert "0.00" not in text and "before its first verify step" in text


def test_a_check_cut_partway_says_how_far_it_got() -> None:
    text = engine_check_text(_check(verify_steps=12, cut_at_deadline=True))
    assert text.startswith("mean accept length 3.27") and "after 12 verify steps" in text


def test_the_model_card_uses_the_same_text(tmp_path) -> None:  # noqa: ANN001
    r = {"config": {"method": "eagle3", "target": "t", "ttt_steps": 5, "lr": 1e-3, "spec_steps": 5}, "device": "cpu",
         "torch": "x", "precision": "fp32", "steps": 1, "epochs_seen": 1.0, "train_s": 1.0,
         "data": {"train": {"sequences": 1, "tokens": 10, "training_positions": 5}},
         "held_out_final": {"acc": [0.5], "expected_accept_length": 1.5},
         "engine_acceptance": _check(mean_accept_length=0.0, per_position=[], verify_steps=0, cut_at_deadline=True)}
    write_model_card(tmp_path, r)
    assert "before its first verify step: no figure" in (tmp_path / "README.md").read_text()
