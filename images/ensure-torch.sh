#!/bin/sh
# Make sure python3 (with pip) and torch are importable, installing only what is missing.
#   TORCH_VERSION    torch version to install when the base image has none (e.g. 2.13.0)
#   TORCH_INDEX_URL  pip index for the torch wheel (https://download.pytorch.org/whl/cpu, ...); when empty,
#                    https://download.pytorch.org/whl/cu<CUDA_VERSION without the dot>, e.g. cu130 for 13.0
# pytorch/pytorch images already have both, so this is a no-op there. A plain nvidia/cuda image gets python3
# from apt and a virtualenv at /opt/venv (Ubuntu's system Python refuses pip installs, PEP 668).
set -eu

if ! command -v python3 >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update
    apt-get install -y --no-install-recommends python3 python3-venv ca-certificates
    rm -rf /var/lib/apt/lists/*
    python3 -m venv /opt/venv
elif ! python3 -m pip --version >/dev/null 2>&1; then
    python3 -m venv /opt/venv
fi
# /opt/venv/bin is first on PATH (see the Dockerfile), so python3 is the venv's from here on.
hash -r 2>/dev/null || true

if [ -z "${TORCH_INDEX_URL:-}" ]; then
    TORCH_INDEX_URL="https://download.pytorch.org/whl/cu$(echo "${CUDA_VERSION:-13.0}" | tr -d .)"
fi

if python3 -c 'import torch' >/dev/null 2>&1; then
    echo "ensure-torch: using the base image's torch $(python3 -c 'import torch; print(torch.__version__)')"
else
    echo "ensure-torch: installing torch==${TORCH_VERSION} from ${TORCH_INDEX_URL}"
    python3 -m pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"
fi
