"""Fixtures of the backend tests."""
from __future__ import annotations

import pytest

from collage.backends import get_backend, unavailable_reason


@pytest.fixture(scope="module")
def openvino():
    """The OpenVINO backend (skipped, saying why, where it cannot run here)."""
    reason = unavailable_reason("openvino")
    if reason is not None:
        pytest.skip(f"openvino: {reason}")
    return get_backend("openvino")
