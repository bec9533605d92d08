"""``updraft train-draft`` flags come from ``TrainConfig``; bad values give one ``error:`` line
and exit status 2 before anything is loaded."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from updraft.cli import build_parser, main
from updraft.train.cli import config_from_args
from updraft.train.config import TrainConfig


def test_defaults_come_from_the_dataclass() -> None:
    args = build_parser().parse_args(["train-draft", "--out", "o"])
    cfg = config_from_args(args)
    assert cfg == TrainConfig(out="o")
    args = build_parser().parse_args(
        ["train-draft", "--model", "m.gguf", "--out", "o", "--method", "eagle3", "--steps", "7", "--budget", "30",
         "--no-progress", "--resume", "--lr", "1e-3"]
    )
    cfg = config_from_args(args)
    assert (cfg.target, cfg.method, cfg.steps, cfg.time_budget, cfg.progress, cfg.resume, cfg.lr) == (
        "m.gguf", "eagle3", 7, 30.0, False, True, 1e-3
    )
    assert TrainConfig().prompt_set == "v3"
    assert config_from_args(build_parser().parse_args(["train-draft", "--out", "o", "--prompt-set", "v4"])).prompt_set == "v4"


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--method", "medusa"], "method='medusa' is invalid: choose eagle or eagle3"),
        (["--steps", "0"], "steps=0 is invalid"),
        (["--held-out", "500", "--num-prompts", "100"], "held_out=500 is invalid: must be smaller than num_prompts=100"),
        (["--gen-fraction", "1.5"], "gen_fraction=1.5 is invalid"),
        (["--precision", "fp8"], "precision='fp8' is invalid"),
        (["--sdpa", "flash"], "sdpa='flash' is invalid: choose one of auto, no-cudnn"),
        (["--time-budget", "-3"], "time_budget=-3.0 is invalid"),
        (["--save-dtype", "int8"], "save_dtype='int8' is invalid"),
        (["--prompt-set", "v7"], "prompt_set='v7' is invalid: choose one of v3, v4, v5, v6"),
        (["--head-intermediate-size", "0"], "head_intermediate_size=0 is invalid: must be an integer >= 1"),
        (["--head-layers", "0"], "head_layers=0 is invalid: must be an integer >= 1"),
        (["--early-weight", "0"], "early_weight=0.0 is invalid: must be > 0"),
        (["--early-tokens", "0"], "early_tokens=0 is invalid: must be an integer >= 1"),
        (["--hard-label-weight", "1.5"], "hard_label_weight=1.5 is invalid: must be in [0, 1]"),
        (["--feature-noise", "-0.1"], "feature_noise=-0.1 is invalid: must be in [0, 1]"),
        (["--aux-layers", "1,2,3"], "aux_layers='1,2,3' is invalid: only an EAGLE-3 head (--method eagle3) reads"),
        (["--method", "eagle3", "--aux-layers", "1,14"], "aux_layers='1,14' is invalid: give three or more distinct"),
        (["--method", "eagle3", "--aux-layers", "1,x,3"], "aux_layers='1,x,3' is invalid: give three or more distinct"),
        (["--method", "eagle3", "--aux-layers", "2,2,3"], "aux_layers='2,2,3' is invalid: give three or more distinct"),
        (["--method", "eagle3", "--aux-layers=-1,2,3"], "aux_layers='-1,2,3' is invalid: give three or more distinct"),
        (["--method", "eagle3", "--aux-layers", "1,2,3,2"], "aux_layers='1,2,3,2' is invalid: give three or more distinct"),
        (["--method", "eagle3", "--init-from", "nowhere"], "init_from='nowhere' is invalid: no head folder there"),
        (["--resume-from", "nowhere"], "resume_from='nowhere' is invalid: no head folder there"),
    ],
)
def test_bad_values_are_one_line_errors(capsys, tmp_path, argv: list[str], needle: str) -> None:  # noqa: ANN001
    assert main(["train-draft", "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err
    assert not (tmp_path / "o").exists()  # refused before doing anything


def test_out_is_required(capsys) -> None:  # noqa: ANN001
    assert main(["train-draft"]) == 2
    assert "out is required" in capsys.readouterr().err


def test_every_field_is_a_flag() -> None:
    parser = argparse.ArgumentParser()
    from updraft.train.cli import add_train_parser

    sub = parser.add_subparsers()
    p = add_train_parser(sub)
    dests = {a.dest for a in p._actions}
    assert {f.name for f in dataclasses.fields(TrainConfig)} <= dests


def test_from_kwargs_refuses_unknown_names() -> None:
    with pytest.raises(ValueError, match="unknown train-draft option"):
        TrainConfig.from_kwargs(out="x", stepz=3)
