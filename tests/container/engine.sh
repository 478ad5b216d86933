#!/usr/bin/env bash
# `make test-container`: runs a command against a Docker engine of its own, never the system's.
#
#   tests/container/engine.sh DIR COMMAND...
#
# Installs Debian's docker.io and mmdebstrap when they are missing (as root; no service is started), starts
# dockerd with its own socket, data root, exec root and pidfile under DIR (the data root is kept between
# runs: the stand-in images are cached there), runs COMMAND with DOCKER_HOST pointing at it, and stops the
# daemon on the way out, whatever happened. No default bridge and no iptables rules: the tests make a network of
# their own (the engine publishes ports through its proxy), and builds use the host's network to reach PyPI.
set -euo pipefail

dir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
# containerd's sockets live under the exec root, whose path must stay short (unix sockets: 108 bytes).
exec_root="/run/tritonize-dockerd-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "the container tests need ${need[*]}: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
  echo "installing ${need[*]} (Debian's packages; no Docker service is started)"
  # policy-rc.d forbids the packages' scripts to start services: only this script's daemon runs.
  had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
  [ "$had_policy" = 1 ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  [ "$had_policy" = 1 ] || rm -f /usr/sbin/policy-rc.d
fi
if [ "$(id -u)" != 0 ]; then
  echo "the container tests start their own dockerd, which needs root" >&2
  exit 1
fi

stop_daemon() {
  local pid
  pid=$(cat "$pidfile" 2>/dev/null || true)
  # Only this script's dockerd: a pidfile left behind may name a PID that another process reuses now.
  if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    kill -TERM "$pid"
    for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; sleep 1; fi
  fi
  rm -f "$pidfile"
  # What the daemon leaves: its network namespace's bind mount, its runtime state; the data root is kept.
  if [ -d "$exec_root/netns" ]; then
    for ns in "$exec_root"/netns/*; do umount "$ns" 2>/dev/null || true; done
  fi
  rm -rf --one-file-system "$exec_root"
}

stop_daemon  # one left by a run that was killed
trap stop_daemon EXIT
trap "exit 130" INT TERM
dockerd --iptables=false --ip-masq=false --bridge=none \
  --data-root "$dir/data" --exec-root "$exec_root" --pidfile "$pidfile" \
  -H "unix://$sock" >"$dir/dockerd.log" 2>&1 &
for _ in $(seq 1 120); do
  if curl -sf --unix-socket "$sock" http://localhost/_ping >/dev/null 2>&1; then break; fi
  if ! kill -0 $! 2>/dev/null; then echo "dockerd did not start:" >&2; tail -20 "$dir/dockerd.log" >&2; exit 1; fi
  sleep 0.5
done
curl -sf --unix-socket "$sock" http://localhost/_ping >/dev/null || { echo "dockerd did not answer" >&2; exit 1; }

export DOCKER_HOST="unix://$sock" TRITONIZE_CONTAINER_TESTS=1 TRITONIZE_CONTAINER_DIR="$dir"
"$@"
