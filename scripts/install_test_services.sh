#!/usr/bin/env bash
# Install the system services the test suite runs for real (Debian/Ubuntu packages).
# Idempotent and quiet: installs only what is missing. Run as root (CI does, through
# `bash scripts/bootstrap.sh dev`) or with passwordless sudo.
#   bash scripts/install_test_services.sh
# Blocks below each check their own binaries; add new services as another block that
# calls `install_debian_packages PKG...` when its binary is missing.
set -euo pipefail

SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "[test-services] not root and no passwordless sudo: skipping system packages" \
         "(tests that need them will skip and say so)" >&2
    exit 0
  fi
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "[test-services] no apt-get on this machine: install the packages named below by hand" >&2
  exit 0
fi

_APT_UPDATED=0
_APT_LOG="$(mktemp -t spotfleet-apt.XXXXXX)"
trap 'rm -f "$_APT_LOG"' EXIT

# install_debian_packages PKG...: apt-get update once per run, then install quietly.
install_debian_packages() {
  if [ "$_APT_UPDATED" = 0 ]; then
    $SUDO apt-get update -qq >"$_APT_LOG" 2>&1 || { tail -20 "$_APT_LOG" >&2; return 1; }
    _APT_UPDATED=1
  fi
  echo "[test-services] installing $*"
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$@" \
      >"$_APT_LOG" 2>&1; then
    echo "[test-services] apt-get install $* failed:" >&2
    tail -20 "$_APT_LOG" >&2
    return 1
  fi
}

# missing_commands CMD...: print the commands not on PATH.
missing_commands() {
  local cmd
  for cmd in "$@"; do command -v "$cmd" >/dev/null 2>&1 || echo "$cmd"; done
}

# --- Ceph RADOS Gateway: the real S3-compatible server for tests/s3 and the S3 benchmark.
if [ -n "$(missing_commands ceph-mon ceph-osd radosgw radosgw-admin monmaptool ceph)" ]; then
  install_debian_packages ceph-mon ceph-osd radosgw ceph-common
fi

# --- Headless Chromium + playwright-core for tests/browser (the Dagster UI test).
# Debian's chromium package (/usr/bin/chromium) is driven by playwright-core from npm,
# installed outside the repository in $SPOTFLEET_BROWSER_TOOLS (default ~/.cache/spotfleet-browser).
if [ -n "$(missing_commands chromium)" ]; then
  install_debian_packages chromium
fi
if [ -n "$(missing_commands node npm)" ]; then
  install_debian_packages nodejs npm
fi
_BROWSER_TOOLS="${SPOTFLEET_BROWSER_TOOLS:-$HOME/.cache/spotfleet-browser}"
if [ ! -f "$_BROWSER_TOOLS/node_modules/playwright-core/package.json" ]; then
  echo "[test-services] installing playwright-core into $_BROWSER_TOOLS"
  mkdir -p "$_BROWSER_TOOLS"
  (cd "$_BROWSER_TOOLS" && npm install --silent --no-audit --no-fund playwright-core@1.65.1 >/dev/null) || {
    echo "[test-services] npm install playwright-core failed (browser tests will skip)" >&2
  }
fi
