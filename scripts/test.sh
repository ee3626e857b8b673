#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the project (with the Ray extra), makes sure
# a Redis server answers on 127.0.0.1:6379 (starts one if not), Chromium with its chromedriver and
# the network-namespace tools the Ray test uses are installed, lints and checks the formatting, then
# runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
if ! .venv/bin/python -c "import redis,sys; redis.Redis(host='127.0.0.1', port=6379, socket_timeout=1).ping()" 2>/dev/null; then
  if ! command -v redis-server >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq redis-server) >/dev/null
  fi
  redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
  for _ in $(seq 50); do
    .venv/bin/python -c "import redis; redis.Redis(port=6379, socket_timeout=1).ping()" 2>/dev/null && break
    sleep 0.1
  done
fi
# the search page's browser test drives Debian's chromium through its chromedriver (tests/service/test_page.py);
# here it must run, so a missing browser fails the test instead of skipping it
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver) >/dev/null
fi
export QASLR_REQUIRE_BROWSER=${QASLR_REQUIRE_BROWSER:-1}
# the Ray backend's test runs a two-node Ray cluster inside a loopback-only network namespace
# (unshare from util-linux, ip from iproute2); here it must run instead of skipping
if ! command -v ip >/dev/null 2>&1 || ! command -v unshare >/dev/null 2>&1; then
  (apt-get update -qq && apt-get install -y -qq iproute2 util-linux) >/dev/null
fi
export QASLR_REQUIRE_RAY=${QASLR_REQUIRE_RAY:-1}
.venv/bin/ruff check .
.venv/bin/ruff format --check .
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} .venv/bin/python -m pytest -q "$@"
