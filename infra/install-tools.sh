#!/usr/bin/env bash
# Install the infrastructure lint tools that cannot share the project's venv.
# checkov pins versions that make pip's resolver backtrack against farm's own
# dependencies, so it lives in its own venv at .venv-tools/ (gitignored).
# Usage: infra/install-tools.sh [PYTHON]   (default: python3)
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${1:-python3}"
venv="${FARM_TOOLS_VENV:-$repo_root/.venv-tools}"
checkov_spec="checkov>=3.2,<4"

if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "$checkov_spec"
"$venv/bin/checkov" --version
