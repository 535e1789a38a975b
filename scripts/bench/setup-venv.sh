#!/usr/bin/env bash
# Creates .venv-bench with PyTorch (CPU use) and transformers from PyPI: the peer the
# benchmarks run in the same run as ours. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ ! -x .venv-bench/bin/python ]; then
    python3 -m venv .venv-bench
fi
.venv-bench/bin/python -c "import torch, transformers" 2>/dev/null && { echo ".venv-bench ready"; exit 0; }
.venv-bench/bin/pip install --quiet --upgrade pip
.venv-bench/bin/pip install --quiet torch transformers safetensors
.venv-bench/bin/python -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
