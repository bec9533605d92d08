"""``benchmarks/head_soup.py``: weight averages of EAGLE-3 heads, exactly the head that would ship."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file


def _head(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"fc.weight": torch.randn(4, 6, generator=g).to(torch.bfloat16), "norm.weight": torch.rand(4, generator=g),
            "d2t": torch.tensor([0, 2, 5]), "t2d": torch.tensor([True, False, True])}


def test_mix_is_the_weighted_mean_rounded_to_each_tensors_dtype(load_benchmark: Callable[[str], Any]) -> None:
    soup = load_benchmark("head_soup")
    a, b = _head(0), _head(1)
    mix = soup.parse_mix("A=1,B=3", {"A", "B"})
    assert mix == {"A": 0.25, "B": 0.75}
    out = soup.average({"A": a, "B": b}, mix)
    want = (0.25 * a["fc.weight"].double() + 0.75 * b["fc.weight"].double()).to(torch.bfloat16)
    assert out["fc.weight"].dtype == torch.bfloat16 and torch.equal(out["fc.weight"], want)
    assert out["norm.weight"].dtype == torch.float32
    assert torch.allclose(out["norm.weight"], 0.25 * a["norm.weight"] + 0.75 * b["norm.weight"])
    assert torch.equal(out["d2t"], a["d2t"]) and torch.equal(out["t2d"], a["t2d"])
    assert all(torch.equal(soup.average({"A": a, "B": b}, {"A": 1.0})[k], v) for k, v in a.items())


def test_heads_with_other_token_maps_or_shapes_do_not_mix(load_benchmark: Callable[[str], Any]) -> None:
    soup = load_benchmark("head_soup")
    a, b = _head(0), _head(1)
    b["d2t"] = torch.tensor([0, 2, 6])
    with pytest.raises(ValueError, match="d2t differ"):
        soup.average({"A": a, "B": b}, {"A": 0.5, "B": 0.5})
    b = _head(1)
    b["fc.weight"] = b["fc.weight"][:, :5]
    with pytest.raises(ValueError, match="shapes differ"):
        soup.average({"A": a, "B": b}, {"A": 0.5, "B": 0.5})
    for bad, msg in (("C=1", "not a --head name"), ("A=x", "not a number"), ("A=0,B=0", "sum to more than 0")):
        with pytest.raises(ValueError, match=msg):
            soup.parse_mix(bad, {"A", "B"})


def test_sharded_folders_read_whole_and_write_as_one_file(tmp_path: Path, load_benchmark: Callable[[str], Any]) -> None:
    soup = load_benchmark("head_soup")
    head = _head(0)
    src = tmp_path / "src"
    src.mkdir()
    keys = sorted(head)
    save_file({k: head[k] for k in keys[:2]}, str(src / "model-00001-of-00002.safetensors"))
    save_file({k: head[k] for k in keys[2:]}, str(src / "model-00002-of-00002.safetensors"))
    (src / "config.json").write_text("{}\n")
    got = soup.read_weights(src)
    assert sorted(got) == keys and all(torch.equal(got[k], head[k]) for k in keys)
    soup.write_head(tmp_path / "out", src / "config.json", got)
    assert [p.name for p in sorted((tmp_path / "out").iterdir())] == ["config.json", "model.safetensors"]
    assert all(torch.equal(soup.read_weights(tmp_path / "out")[k], head[k]) for k in keys)
    with pytest.raises(ValueError, match="no .safetensors"):
        soup.read_weights(tmp_path)
