#!/usr/bin/env bash
# Debian's Chromium for the browser tests (tests/browser/): Playwright (the dev extra) drives /usr/bin/chromium, so
# no browser is downloaded. Idempotent; needs root or sudo. Run after scripts/setup.sh.
#
#   bash scripts/setup_browser.sh
#   DPHR_REQUIRE_BROWSER=1 .venv/bin/python -m pytest tests/browser    # fail instead of skip without Chromium
set -euo pipefail
if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    echo "ok: $(/usr/bin/chromium --version 2>/dev/null) (already installed)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q chromium chromium-driver
echo "ok: $(/usr/bin/chromium --version 2>/dev/null)"
