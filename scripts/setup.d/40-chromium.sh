#!/usr/bin/env bash
# Debian's Chromium (and a font) for the results site's browser test, which opens the built pages
# headless with the network off (tests/integration/test_site_browser.py). Idempotent; never
# downloads a browser of its own.
set -euo pipefail
need=()
dpkg -s chromium >/dev/null 2>&1 || need+=(chromium)
dpkg -s fonts-dejavu-core >/dev/null 2>&1 || need+=(fonts-dejavu-core)
if [ "${#need[@]}" -eq 0 ]; then
  echo "chromium: already installed"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "40-chromium: need root to install ${need[*]} (apt-get install ${need[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "chromium: installed ${need[*]}"
