#!/usr/bin/env bash
# Fetch, HERE (where pip reaches PyPI), the wheels that scripts/device_bench.sh installs offline on
# the H200 machine: its python3 (3.12, x86-64) has PyTorch, httpx and tqdm but no pydantic.
#
#   scripts/device_wheels.sh          # writes .whl/ (git-ignored, about 3 MB)
#
# then name it in the device call: run(command="bash scripts/device_bench.sh", carry=[".whl"]).
# The versions are the ones this checkout's virtual environment runs (pydantic and pydantic-core
# must match each other exactly); --no-deps, so each needed package is named.
set -euo pipefail

cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
DEST=.whl
PACKAGES=(pydantic pydantic-core annotated-types typing-inspection typing-extensions)

pins=()
for package in "${PACKAGES[@]}"; do
    version=$("$PYTHON" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" \
        "$package") || {
        echo "device_wheels: $PYTHON has no $package; install the project first" >&2
        exit 2
    }
    pins+=("$package==$version")
done

rm -rf "$DEST"
mkdir -p "$DEST"
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 \
    -d "$DEST" "${pins[@]}"
ls -l "$DEST"
count=$(find "$DEST" -type f -name '*.whl' | wc -l)
if [ "$count" -ne "${#PACKAGES[@]}" ]; then
    echo "device_wheels: expected ${#PACKAGES[@]} wheels in $DEST, got $count" >&2
    exit 1
fi
echo "device_wheels: ${pins[*]} in $DEST; carry it: carry=[\"$DEST\"]"
