"""The Triton kernels compile for sm_90 (Triton's host-side compiler and bundled ptxas, no GPU)."""

import os
import subprocess
import sys

import pytest

from radixgate.engine.kernels.triton_runtime import HAS_TRITON

pytestmark = pytest.mark.slow  # compiles every kernel


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_kernels_compile_for_hopper():
    env = dict(os.environ, TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1")
    result = subprocess.run(
        [sys.executable, "-m", "radixgate.bench.compile_check", "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("sm_90")]
    assert len(lines) == 7 and all(" ok " in line for line in lines), result.stdout
