#!/usr/bin/env bash
# kvgate under py-spy during a non-streaming load (c=32 by default); see bench/overhead/profile.py.
#   bench/overhead/profile.sh [--profile-seconds 20] [--profile-format raw|speedscope|flamegraph] [--profile-native]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec .venv/bin/python -m bench.overhead --profile "$@"
