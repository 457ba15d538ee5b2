#!/usr/bin/env bash
# GPU check for radixgate's Triton kernels and FP8 KV cache, on a CUDA machine with nothing but
# this repository:
#   1. creates a venv with a CUDA build of torch and triton (python3's own, when it has them;
#      otherwise from PyPI) and installs radixgate into it (from PyPI, or offline from wheels
#      that scripts/gpu_wheels.sh downloaded beforehand into .whl/);
#   2. runs the kernel tests on CUDA (compiled kernels, not the interpreter);
#   3. benchmarks decode attention's achieved bandwidth against a device copy (batch 64 x 4096
#      tokens, Llama-3.1-8B attention shapes) and extend attention's throughput;
#   4. runs the engine end to end on a Llama-3.1-8B-shaped random-weight checkpoint in bf16,
#      with 16-bit and with FP8 KV;
#   5. prints the FP8 quality figures with the Triton backend on CUDA;
#   6. checks decode steps replayed as CUDA graphs against eager decode (token equality on the tiny
#      model, tokens/s on the 8B shape at batch 1, 8, 32, 64);
#   7. the same for overlap scheduling (step N+1 launched before step N's tokens are read back),
#      with and without graphs.
#   8. tensor parallelism, on a machine with two or more GPUs: TP=2 against TP=1 (NCCL ranks),
#      tokens/s and the fidelity table; skipped, saying so, with one GPU.
# Every step runs even if an earlier one failed; logs and a summary go to $OUT (gpu_results/).
#
#   bash scripts/gpu_check.sh                 # everything
#   SKIP_INSTALL=1 bash scripts/gpu_check.sh  # reuse the venv
#   STEPS="tests kernels" bash scripts/gpu_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv-gpu}
OUT=${OUT:-gpu_results}
STEPS=${STEPS:-"tests kernels engine quality cuda_graph overlap tp"}
PY="$VENV/bin/python"
mkdir -p "$OUT"
declare -A STATUS

if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    command -v nvidia-smi >/dev/null && nvidia-smi | tee "$OUT/nvidia-smi.txt"
    if python3 -c "import torch, triton, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
        # A GPU image with a CUDA torch and triton already (often offline): build on them. python3
        # may itself be a venv, whose packages a nested --system-site-packages venv would not see,
        # so a .pth file puts python3's site-packages after the new venv's own.
        echo "using the CUDA torch and triton that python3 already has"
        if ! test -x "$PY"; then
            python3 -m venv "$VENV"
            python3 -c "import site; print('\n'.join(site.getsitepackages()))" \
                > "$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/gpu-image-packages.pth"
        fi
    else
        test -x "$PY" || python3 -m venv "$VENV"
        "$PY" -m pip install -q --upgrade pip
        # Unpinned on purpose: the project pins torch==2.13.0 for CPU installs; here we want whichever
        # CUDA build PyPI serves for this machine, and triton to match it.
        "$PY" -m pip install -q torch triton
        if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
            echo "torch from the default index has no CUDA here; trying the CUDA 12.8 wheel index"
            "$PY" -m pip install -q --force-reinstall torch triton --index-url https://download.pytorch.org/whl/cu128
        fi
    fi
    "$PY" -c "import tomllib" 2>/dev/null || "$PY" -m pip install -q tomli   # Python < 3.11
    "$PY" scripts/gpu_requirements.py > "$OUT/requirements.txt"
    # Requirements already met (by the image's packages, say) stay as they are. Without PyPI, the
    # rest, and setuptools to build radixgate, come from the wheels scripts/gpu_wheels.sh put in $WHEELS.
    WHEELS=${WHEELS:-.whl}
    SOURCE=()
    if [ -d "$WHEELS" ] && ! "$PY" -m pip download -q --no-deps --retries 0 --timeout 5 -d /tmp/radixgate-probe six >/dev/null 2>&1; then
        echo "PyPI is out of reach; installing from $WHEELS"
        SOURCE=(--no-index --find-links "$WHEELS")
    fi
    "$PY" -m pip install -q "${SOURCE[@]}" -r "$OUT/requirements.txt"
    "$PY" -m pip install -q "${SOURCE[@]}" --no-deps -e .
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
run_step kernels "$PY" -m radixgate.bench.kernels --batch 64 --context 4096
run_step engine "$PY" -m radixgate.bench.gpu_engine --shape 8b --num-requests 64 --prompt-len 1024 --shared-prefix 512 \
    --output-len 128
run_step quality "$PY" -m radixgate.bench.fp8_quality --device cuda --attention-backend triton
run_step cuda_graph "$PY" -m radixgate.bench.cuda_graph --shape 8b --batch-sizes 1 8 32 64 --output-len 64
run_step overlap "$PY" -m radixgate.bench.cuda_graph --modes graph graph+overlap eager overlap --shape 8b \
    --batch-sizes 1 8 32 64 --output-len 64

NUM_GPUS=$(nvidia-smi -L 2>/dev/null | wc -l)
if [ "$NUM_GPUS" -ge 2 ]; then
    run_step tp "$PY" -m radixgate.bench.tp --device cuda --tp-size 2 --batch 32 --prompt-len 1024 --decode-tokens 64
else
    echo "=== tp: skipped: this machine has $NUM_GPUS GPU (tensor parallelism needs two or more)"
    STATUS[tp]="skipped: $NUM_GPUS GPU"
fi

echo "=== summary (logs in $OUT/)"
for name in $STEPS; do
    echo "$name: ${STATUS[$name]:-skipped}"
done | tee "$OUT/summary.txt"
grep -h "^decode .*of copy\|^RESULT\|passed\|failed\|^kv \|^tiny\|^fp8-quality\|^cuda-graph\|^llama3_gqa \|^qwen2 \|^mistral \|^TP=" "$OUT"/*.log 2>/dev/null | cut -c1-400
