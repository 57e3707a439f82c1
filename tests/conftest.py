"""Shared fixtures: graphs captured from real lowerings, built once per test session."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

import pytest

# The suite runs strict: an unexpected failure of the accelerated path (an exception, a
# mispredicted value) raises instead of falling back silently. Tests that provoke a fallback on
# purpose turn it off for themselves (the ``lenient`` fixture).
os.environ.setdefault("ARM_ACCEL_STRICT", "1")
from arm_accel import _native, testing
from arm_accel.tools import capture, models

if os.environ.get("ARM_ACCEL_REQUIRE_TESTING") == "1" and not _native.TESTING:
    raise pytest.UsageError(
        "ARM_ACCEL_REQUIRE_TESTING=1 but the extension lacks the test-only bindings: build it "
        "with `maturin develop --release --features testing` (scripts/setup.sh does)"
    )

# CI-sized models whose lowerings the tests capture (INT and FP).
CAPTURE_MODELS = ("dscnnkws", "resnet8", "llama1", "llama1-fp")


@functools.cache
def captured_lowering(name: str) -> tuple[list[capture.Captured], list[bytes]]:
    """Lower zoo model ``name`` stock once, recording what the view/permute passes receive.

    Returns the captured pass inputs and the TOSA bytes of the lowering. Cached for the session.
    """
    model, inputs, mode = models.build(name)
    exported = models.export_for_arm(model, inputs, mode)
    with capture.capture() as records:
        edge = models.lower(exported, mode)
    return records, models.tosa_bytes(edge)


@pytest.fixture(scope="session", autouse=True)
def graphs_tracked() -> Iterator[None]:
    """Provenance records made in the session remember which graph object they name
    (``testing.tracking_graphs``): the contract compares graph ids up to renaming, and an id is
    an address, given to another graph once its graph is freed."""
    with testing.tracking_graphs():
        yield


@pytest.fixture
def lenient(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fallbacks instead of raising, for tests that make the accelerated path fail on purpose."""
    monkeypatch.setenv("ARM_ACCEL_STRICT", "0")


@pytest.fixture(scope="session", params=CAPTURE_MODELS)
def captured(request: pytest.FixtureRequest) -> list[capture.Captured]:
    return captured_lowering(request.param)[0]
