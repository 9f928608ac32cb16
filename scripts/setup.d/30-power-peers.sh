#!/usr/bin/env bash
# Power-source test peers (tests/integration/power): installs what the power tests talk to.
#   - Debian: nginx (Redfish Basic auth and sessions), openipmi + ipmitool + libopenipmi-dev
#     (ipmi_sim answering DCMI, built by ../shared/peers/start-ipmi.sh), gcc + libc6-dev (that
#     module and the tests' fake libnvidia-ml.so.1), prometheus-node-exporter (DCGM-named
#     metrics), openssl and curl (start-redfish.sh).
#   - PyPI: sushy-tools in one venv shared by every Redfish test server
#     ($TOKENWATT_PEERS_DIR/sushy-venv, default ${TMPDIR:-/tmp}/tokenwatt-peers/sushy-venv).
# Idempotent: installs only what is missing. Needs root (apt) on a clean Debian 12 machine.
set -euo pipefail

SUSHY_VERSION=2.2.0  # keep in step with tests/integration/power/conftest.py
PEERS_DIR="${TOKENWATT_PEERS_DIR:-${TMPDIR:-/tmp}/tokenwatt-peers}"

need=()
have() { command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" ]]; }
have nginx || need+=(nginx)
have ipmi_sim || need+=(openipmi)
have sdrcomp || need+=(openipmi)
have ipmitool || need+=(ipmitool)
[[ -f /usr/include/OpenIPMI/mcserv.h ]] || need+=(libopenipmi-dev)
have gcc || need+=(gcc libc6-dev)
have prometheus-node-exporter || need+=(prometheus-node-exporter)
have openssl || need+=(openssl)
have curl || need+=(curl)

if ((${#need[@]})); then
  echo "30-power-peers: apt-get install ${need[*]}"
  if [[ $(id -u) != 0 ]]; then
    echo "30-power-peers: need root to install ${need[*]} (the power tests use them)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  log="$(mktemp)"
  if ! apt-get install -y --no-install-recommends "${need[@]}" >"$log" 2>&1; then
    apt-get update >>"$log" 2>&1
    apt-get install -y --no-install-recommends "${need[@]}" >>"$log" 2>&1 \
      || { tail -30 "$log" >&2; echo "30-power-peers: apt-get install failed" >&2; exit 1; }
  fi
  rm -f "$log"
fi

venv="$PEERS_DIR/sushy-venv"
if ! "$venv/bin/python" -c "import sushy_tools" >/dev/null 2>&1; then
  echo "30-power-peers: sushy-tools==$SUSHY_VERSION into $venv"
  mkdir -p "$PEERS_DIR"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "sushy-tools==$SUSHY_VERSION"
fi
