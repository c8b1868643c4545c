#!/usr/bin/env bash
# The GPU check (docs/gpu-check.md): a smoke check of a booked GPU node, in one command that
# needs neither make nor a network. The node's own python3 holds the framework (a CUDA build of
# torch); the kit's own packages it lacks come as wheels in .whl/ (`make gpu-pack`), installed
# into a scratch folder that is removed at the end, never into the node's Python.
#
#   OUT=/where/results/go bash tools/gpu-check.sh [--stages core] [--budget-s 420] [--resume A]
#
# Everything it writes lands in $OUT (4 files): summary.md, summary.json, the session archive
# gpu-check.tar.gz (checked and unpacked at home by `python3 tools/gpu_check.py unpack`) and
# console.log. Killing this script (any signal, SIGKILL included) stops every stage and
# benchmark it started. Exit: 0 done (stages cut or skipped at the budget included), 1 a stage
# failed, 2 a bad option, 3 the kit cannot start on this node, or torch does not see the GPU
# that nvidia-smi lists (the reason is printed; the facts are in the archive).
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder the results go to}"
PYTHON=${GPU_CHECK_PYTHON:-python3}
if [ -e "$OUT" ] && [ ! -d "$OUT" ]; then
    echo "gpu-check: OUT=$OUT is a file; give a folder for the results" >&2
    exit 2
fi
mkdir -p "$OUT"
# One scratch folder holds the wheels' install and, as the check's TMPDIR, its work folder:
# removed when this script ends, also when the check under it was killed.
scratch=$(mktemp -d "${TMPDIR:-/tmp}/dlperf-gpu-check.XXXXXX")
site="$scratch/site"
remove_scratch() {  # a stage stopping at that moment may still write: try for 10 s
    for _ in $(seq 50); do
        rm -rf "$scratch" 2>/dev/null
        [ -e "$scratch" ] || return 0
        sleep 0.2
    done
}
trap remove_scratch EXIT
: >"$OUT/console.log"
if compgen -G ".whl/*.whl" >/dev/null; then
    # --no-deps: the wheel folder is the whole closure the node lacks (tools/gpu-wheels.txt).
    if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$site" .whl/*.whl >>"$OUT/console.log" 2>&1; then
        echo "gpu-check: the wheels in .whl/ did not install into $PYTHON (see $OUT/console.log)" >&2
        exit 3
    fi
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1  # nothing written into the kit's copy
# The kit's own packages must import before any stage starts: a missing .whl/ is a reason
# in two seconds, not ten failed stages.
if ! why=$("$PYTHON" -c 'import pydantic, yaml, tabulate, driver.frontend.cli, driver.diagnose.gpucheck.check' 2>&1); then
    echo "gpu-check: the kit cannot start under $PYTHON: $(printf '%s\n' "$why" | tail -n 1)." \
        "The wheels of \`make gpu-pack\` (in .whl/, for this Python's version) bring pydantic," \
        "Fabric and the docker SDK; PyYAML, tabulate, rich, scipy, matplotlib and nvidia-ml-py" \
        "are the node's own (docs/gpu-check.md)" | tee -a "$OUT/console.log" >&2
    exit 3
fi
# In the background so that a signal to this script is passed on at once (a foreground
# command would hold the trap until it ended); the check restores SIGINT for its stages.
TMPDIR="$scratch" DLPERF_GPU_CHECK_SCRATCH="$scratch" "$PYTHON" tools/gpu_check.py run --out "$OUT" --python "$(command -v "$PYTHON")" "$@" \
    > >(tee -a "$OUT/console.log") 2>&1 &
check=$!
trap 'kill -TERM "$check" 2>/dev/null' TERM INT HUP
status=0
wait "$check" || status=$?
while kill -0 "$check" 2>/dev/null; do  # a signal ended the wait: let the check stop its stages
    wait "$check"
    status=$?
done
exit "$status"
