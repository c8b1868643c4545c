#!/usr/bin/env bash
# The whole GPU check in one command, on a machine whose own python3 holds the framework (a
# CUDA build of torch) but not the driver's packages: those come as wheels in .whl/ (made here
# by `make gpu-wheels`), installed into a scratch folder, never into the machine's Python.
#
#   OUT=/where/results/go bash tools/gpu-check.sh [tools/gpu_check.py run options]
#
# Everything it writes lands in $OUT (at most 8 files): summary.md, summary.json, the session
# archive gpu-check.tar.gz (unpacked here by `python3 tools/gpu_check.py unpack`), console.log.
set -uo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?set OUT to the folder the results go to}"
PYTHON=${GPU_CHECK_PYTHON:-python3}
mkdir -p "$OUT"
site=$(mktemp -d /tmp/dlperf-site.XXXXXX)
if compgen -G ".whl/*.whl" >/dev/null; then
    # --no-deps: the wheel folder is the whole closure the machine lacks (tools/gpu-wheels.txt).
    if ! "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
        --target "$site" .whl/*.whl >"$OUT/console.log" 2>&1; then
        echo "gpu-check: the carried wheels did not install (see $OUT/console.log)" >&2
        exit 3
    fi
fi
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
"$PYTHON" tools/gpu_check.py run --out "$OUT" --python "$(command -v "$PYTHON")" "$@" \
    2>&1 | tee -a "$OUT/console.log"
exit "${PIPESTATUS[0]}"
