#!/usr/bin/env bash
# The README's first command. Installs what is missing (build tools, Fashion-MNIST from
# Debian's dataset-fashion-mnist, English text from fortunes), builds the `kiln` command,
# and trains the ConvNet on Fashion-MNIST on the best device present, printing progress
# and the final test accuracy. Extra arguments go to `kiln train mnist`, e.g.
#   scripts/train.sh --model lenet --threads 2
# Env: BUILD_DIR (default build), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh dataset-fashion-mnist fortunes
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="${KILN_CUDA_ARCHS:-80}" >/dev/null
cmake --build "$BUILD_DIR" -j "${JOBS:-$(nproc)}" --target kiln_cli
mkdir -p runs
exec "$BUILD_DIR"/kiln train mnist --model convnet --epochs 3 --data /usr/share/datasets/fashion-mnist \
  --save runs/convnet.safetensors --metrics runs/convnet.csv "$@"
