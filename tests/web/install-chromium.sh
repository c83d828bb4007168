#!/usr/bin/env bash
# Headless Chromium for tests/web/test_browser.py (call from .ci/run; Debian, as root).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then exit 0; fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
chromium --version
