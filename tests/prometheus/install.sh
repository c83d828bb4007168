#!/usr/bin/env bash
# Install the Prometheus server (Debian package `prometheus`) and prometheus-node-exporter
# for tests/prometheus and bench/agent_vs_node_exporter.py. Idempotent: does nothing when
# both binaries are already on PATH. The packages' services are NOT started (a policy-rc.d
# refuses invoke-rc.d for the duration); the tests run the binaries directly on loopback.
set -euo pipefail
need=()
# promtool (tests/deploy/test_alert_rules.py) comes in the same Debian package
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-node-exporter >/dev/null 2>&1 || need+=(prometheus-node-exporter)
if [ "${#need[@]}" -eq 0 ]; then
  echo "prometheus and prometheus-node-exporter already installed"
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  created_policy=1
fi
cleanup() { if [ "$created_policy" = 1 ]; then rm -f "$policy"; fi; }
trap cleanup EXIT
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
command -v prometheus >/dev/null
command -v promtool >/dev/null
command -v prometheus-node-exporter >/dev/null
echo "installed: ${need[*]} ($(prometheus --version 2>&1 | head -1))"
