"""Whether the extension carries the test-only bindings (cargo feature ``testing``)."""

from __future__ import annotations

import pytest
from arm_accel import _native

#: Marks a test that calls a test-only binding; it skips on a build without them (the release
#: wheel), while ``scripts/test.sh`` (``ARM_ACCEL_REQUIRE_TESTING=1``) fails such a build.
needs_testing = pytest.mark.skipif(
    not _native.TESTING,
    reason="the extension was built without the test-only bindings (cargo feature `testing`; "
    "scripts/setup.sh builds them: maturin develop --release --features testing)",
)
