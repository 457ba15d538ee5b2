"""Prints what the GPU check needs besides torch and triton, one requirement per line
(`--with-build`: and what building radixgate itself needs).

radixgate's dependencies and its `serve` extra (minus torch, whose CPU pin does not apply on a
CUDA machine, and triton, which comes with the CUDA torch), plus the test runner and its plugins.
Read by scripts/gpu_check.sh (to install) and scripts/gpu_wheels.sh (to download wheels for a
machine that cannot reach PyPI).
"""

import sys

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

TEST_TOOLS = ("pytest", "pytest-timeout", "hypothesis")


def name(requirement: str) -> str:
    for sep in ";=<>!~[ ":
        requirement = requirement.split(sep)[0]
    return requirement.strip().lower()


pyproject = tomllib.load(open("pyproject.toml", "rb"))
project = pyproject["project"]
extras = project["optional-dependencies"]
wanted = project["dependencies"] + extras["serve"] + [d for d in extras["dev"] if name(d) in TEST_TOOLS]
if "--with-build" in sys.argv[1:]:
    wanted += pyproject["build-system"]["requires"]
print("\n".join(d for d in wanted if name(d) not in ("torch", "triton")))
