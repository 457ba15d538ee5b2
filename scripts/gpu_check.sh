#!/usr/bin/env bash
# GPU check for radixgate's Triton kernels and FP8 KV cache, on a CUDA machine with nothing but
# this repository (and network access to PyPI):
#   1. creates a venv with a CUDA build of torch and triton, installs radixgate into it;
#   2. runs the kernel tests on CUDA (compiled kernels, not the interpreter);
#   3. benchmarks decode attention's achieved bandwidth against a device copy (batch 64 x 4096
#      tokens, Llama-3.1-8B attention shapes) and extend attention's throughput;
#   4. runs the engine end to end on a Llama-3.1-8B-shaped random-weight checkpoint in bf16,
#      with 16-bit and with FP8 KV;
#   5. prints the FP8 quality figures with the Triton backend on CUDA.
# Every step runs even if an earlier one failed; logs and a summary go to $OUT (gpu_results/).
#
#   bash scripts/gpu_check.sh                 # everything
#   SKIP_INSTALL=1 bash scripts/gpu_check.sh  # reuse the venv
#   STEPS="tests kernels" bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
OUT=${OUT:-gpu_results}
STEPS=${STEPS:-"tests kernels engine quality"}
PY="$VENV/bin/python"
mkdir -p "$OUT"
declare -A STATUS

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi | tee "$OUT/nvidia-smi.txt"
    test -x "$PY" || python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
    # Unpinned on purpose: the project pins torch==2.13.0 for CPU installs; here we want whichever
    # CUDA build PyPI serves for this machine, and triton to match it.
    "$PY" -m pip install -q torch triton
    if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "torch from the default index has no CUDA here; trying the CUDA 12.8 wheel index"
        "$PY" -m pip install -q --force-reinstall torch triton --index-url https://download.pytorch.org/whl/cu128
    fi
    # Every other dependency of radixgate[dev], minus the torch pin, then radixgate itself without deps.
    "$PY" -c "import tomllib" 2>/dev/null || "$PY" -m pip install -q tomli   # Python < 3.11
    "$PY" - > "$OUT/requirements.txt" <<'EOF'
try:
    import tomllib
except ImportError:
    import tomli as tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project["optional-dependencies"]
deps = project["dependencies"] + extras["serve"] + [d for d in extras["dev"] if not d.startswith("radixgate")]
print("\n".join(d for d in deps if d.split(";")[0].split("=")[0].split(">")[0].strip() != "torch"))
EOF
    "$PY" -m pip install -q -r "$OUT/requirements.txt"
    "$PY" -m pip install -q --no-deps -e .
fi
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, \
'device', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)" | tee "$OUT/versions.txt"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || { echo "no CUDA device visible"; exit 2; }

run_step() {  # run_step NAME COMMAND...: logs to $OUT/NAME.log, records the exit status
    local name=$1; shift
    case " $STEPS " in *" $name "*) ;; *) return ;; esac
    echo "=== $name: $*"
    local start=$SECONDS
    "$@" 2>&1 | tee "$OUT/$name.log"
    STATUS[$name]="exit ${PIPESTATUS[0]} after $((SECONDS - start)) s"
}

run_step tests "$PY" -m pytest -q -p no:cacheprovider tests/engine/kernels --durations=10
run_step kernels "$PY" -m radixgate.engine.kernels.bench --batch 64 --context 4096
run_step engine "$PY" scripts/gpu_bench.py --shape 8b --num-requests 64 --prompt-len 1024 --shared-prefix 512 \
    --output-len 128
run_step quality "$PY" -m radixgate.engine.kernels.fp8_quality --device cuda --attention-backend triton

echo "=== summary (logs in $OUT/)"
for name in $STEPS; do
    echo "$name: ${STATUS[$name]:-skipped}"
done | tee "$OUT/summary.txt"
grep -h "^decode .*of copy\|^RESULT\|passed\|failed\|^kv \|^tiny\|^fp8-quality" "$OUT"/*.log 2>/dev/null | cut -c1-400
