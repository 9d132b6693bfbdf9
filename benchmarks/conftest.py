import os
import sys
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MINEDRAFT_MODE", "parallel")
sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "unit"))
