"""Shared test helpers: the ../shared fixtures (float64 references of the upstream code)."""
import json
import os
import pathlib

import pytest

SHARED = pathlib.Path(os.environ.get("VAE_SHARED_DIR",
                                     pathlib.Path(__file__).resolve().parents[2] / ".." / "shared"))
FIXTURES = SHARED / "fixtures"


def rel_err(a, b):
    a, b = a.double().cpu(), b.double().cpu()
    assert not a.isnan().any(), "NaN in the output"
    return float((a - b).norm() / b.norm())


def fixture(name):
    return json.loads((FIXTURES / f"{name}.json").read_text())


@pytest.fixture(scope="session")
def shared():
    if not FIXTURES.exists():
        pytest.fail(f"fixtures not found at {FIXTURES} (set VAE_SHARED_DIR)")
    return SHARED
