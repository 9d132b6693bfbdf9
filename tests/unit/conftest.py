"""The unit tier: no vLLM engine may start here (``engine_guard.py``)."""

from __future__ import annotations

import pytest
from engine_guard import refuse_engines


# Per module, not per session: `make test` runs e2e tests and benchmarks in the same
# session after these. Autouse goes first among module fixtures, so theirs are guarded too.
@pytest.fixture(scope="module", autouse=True)
def no_engine_in_unit_tests():
    with refuse_engines():
        yield
