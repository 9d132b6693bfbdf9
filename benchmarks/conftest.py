import sys
from pathlib import Path

from harness.environment import PYTEST_ENV, set_defaults

set_defaults(PYTEST_ENV)  # as tests/conftest.py: vLLM on CPU, offline; MineDraft pinned to parallel steps
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "unit"))
