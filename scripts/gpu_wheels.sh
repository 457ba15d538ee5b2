#!/usr/bin/env bash
# Downloads into .whl/ the wheels scripts/gpu_check.sh needs on a CUDA machine that cannot reach
# PyPI but has Python 3.12 with a CUDA torch and triton (an x86-64 Linux GPU image, say). Run it
# where pip works, then take .whl/ along with the repository (about 50 MB):
#
#   bash scripts/gpu_wheels.sh                         # for CPython 3.12 on manylinux x86-64
#   PYTHON_VERSION=3.11 bash scripts/gpu_wheels.sh     # for another Python
#   WHEEL_DIR=/elsewhere bash scripts/gpu_wheels.sh    # another folder (gpu_check.sh reads $WHEELS)
#
# Everything the requirements pull in is downloaded; on the GPU machine pip keeps whatever the
# image already has at a suitable version and installs the rest from here.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
"$PYTHON" scripts/gpu_requirements.py --with-build > /tmp/radixgate-gpu-requirements.txt
"$PYTHON" -m pip download -q --only-binary=:all: --implementation cp \
    --python-version "${PYTHON_VERSION:-3.12}" \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "${WHEEL_DIR:-.whl}" -r /tmp/radixgate-gpu-requirements.txt
du -sh "${WHEEL_DIR:-.whl}"
