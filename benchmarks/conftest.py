from harness.environment import PYTEST_ENV, set_defaults

set_defaults(PYTEST_ENV)  # as tests/conftest.py: vLLM on CPU, offline
