#!/usr/bin/env bash
# Install a Debian package with apt when a command it provides is missing (as root, as in
# CI); quick when it is there. Usage: scripts/apt_deps.sh PACKAGE WHAT-FOR COMMAND...
# (any one COMMAND found, on PATH or as a path glob, means it is installed).
set -euo pipefail
package="$1" why="$2"
shift 2
for probe in "$@"; do
  if command -v "$probe" >/dev/null 2>&1 || compgen -G "$probe" >/dev/null; then
    exit 0
  fi
done
if [ "$(id -u)" != 0 ]; then
  echo "warning: $package is missing and this is not root: $why will fail;" \
    "install it with: sudo apt-get install $package" >&2
  exit 0
fi
echo "installing $package (apt) for $why"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq "$package" >/dev/null
