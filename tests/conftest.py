"""Shared fixtures: no test touches the network or the user's own cache."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True, scope="session")
def dapr_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every test session gets its own DAPR_HOME, so caches never leak between runs."""
    home = tmp_path_factory.mktemp("dapr_home")
    previous = os.environ.get("DAPR_HOME")
    os.environ["DAPR_HOME"] = str(home)
    yield home
    if previous is None:
        os.environ.pop("DAPR_HOME", None)
    else:
        os.environ["DAPR_HOME"] = previous


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.fail(f"{SHARED_DATA} is missing: check out ../shared beside the project")
    return SHARED_DATA
