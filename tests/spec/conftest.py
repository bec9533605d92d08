"""Random-weight EAGLE / EAGLE-3 heads saved in the published checkpoint key layout."""

from __future__ import annotations

from pathlib import Path

import pytest

from updraft.testing import write_eagle3_head, write_eagle_head


@pytest.fixture(scope="session")
def eagle_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_eagle_head(tmp_path_factory.mktemp("eagle"))


@pytest.fixture(scope="session")
def eagle3_head(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_eagle3_head(tmp_path_factory.mktemp("eagle3"))
