"""Kernel tests run the Triton kernels compiled on CUDA and under Triton's interpreter elsewhere.

TRITON_INTERPRET must be set before `@triton.jit` runs, so it is set here, before any kernel
module is imported by these tests. (The launchers also interpret CPU tensors by themselves,
so a kernel module imported earlier, e.g. by the engine, still runs here.)
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(scope="session")
def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")
