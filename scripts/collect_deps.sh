#!/usr/bin/env bash
# Copies kiln's header-only dependencies (Eigen, doctest, stb, spdlog + fmt) and zlib
# (headers + static library) from this machine's Debian packages into the ignored .deps/
# folder, so that kiln builds on a machine where those packages are absent and nothing
# can be installed (the GPU check: scripts/gpu_check.sh). CMake falls back to .deps/ by
# itself (KILN_DEPS_DIR); gpu_check.sh points CMake at .deps/zlib when zlib is missing.
# Usage: scripts/collect_deps.sh [DEST]   (default: .deps in the repository root)
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=${1:-.deps}

need() {  # need PATH PACKAGE: the file must exist (install the Debian package first)
  if [ ! -e "$1" ]; then
    echo "[collect_deps] error: $1 is missing; install the Debian package $2 (scripts/install_deps.sh)" >&2
    exit 1
  fi
}
need /usr/include/eigen3/Eigen/Core libeigen3-dev
need /usr/include/doctest/doctest.h doctest-dev
need /usr/include/stb/stb_image.h libstb-dev
need /usr/include/spdlog/spdlog.h libspdlog-dev
need /usr/include/fmt/format.h libfmt-dev
need /usr/include/xxhash.h libxxhash-dev
need /usr/include/zlib.h zlib1g-dev
ZLIB_A=$(ls /usr/lib/*-linux-gnu/libz.a /usr/lib/libz.a 2>/dev/null | head -n1 || true)
need "${ZLIB_A:-/usr/lib/x86_64-linux-gnu/libz.a}" zlib1g-dev

rm -rf "$DEST.tmp"
mkdir -p "$DEST.tmp/stb" "$DEST.tmp/xxhash" "$DEST.tmp/doctest" "$DEST.tmp/zlib/include" "$DEST.tmp/zlib/lib"
cp -r /usr/include/eigen3/Eigen "$DEST.tmp/"                      # -> .deps/Eigen/Core
cp /usr/include/doctest/doctest.h "$DEST.tmp/doctest/"            # -> .deps/doctest/doctest.h
cp /usr/include/stb/*.h "$DEST.tmp/stb/"                          # -> .deps/stb/stb_image.h
cp /usr/include/xxhash.h "$DEST.tmp/xxhash/"                      # -> .deps/xxhash/xxhash.h
cp -r /usr/include/spdlog /usr/include/fmt "$DEST.tmp/"           # -> .deps/spdlog, .deps/fmt
cp /usr/include/zlib.h /usr/include/zconf.h "$DEST.tmp/zlib/include/"
cp "$ZLIB_A" "$DEST.tmp/zlib/lib/libz.a"
{
  echo "Collected by scripts/collect_deps.sh on $(date -u +%Y-%m-%d) from Debian packages:"
  dpkg-query -W -f='  ${Package} ${Version}\n' libeigen3-dev doctest-dev libstb-dev libxxhash-dev libspdlog-dev libfmt-dev \
    zlib1g-dev 2>/dev/null || true
  echo "spdlog is used header-only (SPDLOG_HEADER_ONLY) over fmt header-only (FMT_HEADER_ONLY)."
} > "$DEST.tmp/README.txt"
rm -rf "$DEST"
mv "$DEST.tmp" "$DEST"
echo "[collect_deps] wrote $DEST ($(du -sh "$DEST" | cut -f1)): Eigen doctest stb spdlog fmt zlib"
