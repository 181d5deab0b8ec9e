#!/usr/bin/env bash
# The test command: builds (installing packages if needed) and runs the whole test suite twice — optimized
# and under AddressSanitizer + UndefinedBehaviorSanitizer — then fuzzes the text and JSON parsers and the ONNX
# importer briefly.
# Usage: scripts/test.sh [fuzz seconds per target, default 30]
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SECONDS="${1:-30}"

scripts/setup.sh release asan
ctest --preset release -j 2
ctest --preset asan -j 2
scripts/fuzz.sh "$FUZZ_SECONDS"
