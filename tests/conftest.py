import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
BENCHMARKS = SHARED / "benchmarks" / "dnn-partitioning"

# W&B never reaches the network from the tests
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")


@pytest.fixture(scope="session")
def benchmarks_dir() -> Path:
    if not BENCHMARKS.is_dir():
        pytest.skip("the dnn-partitioning benchmark folder (../shared/benchmarks) is not beside the project")
    return BENCHMARKS
