#!/usr/bin/env bash
# Set up, then run every check and test: cargo fmt/clippy/test, ruff, pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=$(bash scripts/setup.sh)
export PATH="$VENV/bin:$PATH"

cargo fmt --check
cargo clippy --all-targets -q -- -D warnings
cargo clippy --all-targets --features python -q -- -D warnings
cargo test -q
python -m ruff check python tests benches
python -m pytest -q "$@"
