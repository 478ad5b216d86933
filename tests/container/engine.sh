#!/usr/bin/env bash
# `make test-container`: runs a command against a Docker engine of its own, never the system's.
#
#   tests/container/engine.sh DIR COMMAND...
#
# Needs Debian's docker.io and mmdebstrap (`make system-deps-container` installs them; no service is started).
# Starts dockerd with its own socket, data root, exec root and pidfile under DIR (the data root is kept between
# runs: the stand-in images are cached there), runs COMMAND with DOCKER_HOST pointing at it, and stops the
# daemon on the way out, whatever happened. No default bridge and no iptables rules: the tests make a network of
# their own (the engine publishes ports through its proxy), and builds use the host's network to reach PyPI.
#
# Compose v2 for `docker compose up` (tests/container/test_docker_compose.py): bookworm has only docker-compose 1.29,
# which refuses the project's file, so Debian trixie's docker-compose 2.26.1 (COMPOSE_VERSION; a static Go binary that
# needs libc6 alone) is fetched with `apt-get download` through an apt configuration and state of its own
# (DIR/compose/apt: its own sources list, lists, cache and an empty dpkg status; the system's apt sources,
# lists and dpkg database are never touched and nothing is installed), checked against its SHA-256, unpacked
# with `dpkg-deb -x` and placed as a CLI plugin in DIR/compose/docker-config/cli-plugins/ (DOCKER_CONFIG).
# Kept between runs; fetched again when COMPOSE_VERSION changes.
set -euo pipefail

COMPOSE_VERSION=2.26.1-4
COMPOSE_SHA256_amd64=47681197cb2b1ab88206b42a1a92fc75f50d9530a6322d03494a473eed0408ea
COMPOSE_SUITE=trixie
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

dir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
# containerd's sockets live under the exec root, whose path must stay short (unix sockets: 108 bytes).
exec_root="/run/tritonize-dockerd-$(printf '%s' "$dir" | cksum | cut -d' ' -f1)"

# Debian's docker.io and mmdebstrap come from `make system-deps-container` (test-container's prerequisite).
for tool in dockerd mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "no $tool: run make system-deps-container (as root)" >&2; exit 1; }
done
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

# Compose v2 as a CLI plugin of Debian's docker CLI (see the top), kept in DIR/compose between runs.
compose_dir="$dir/compose"
compose_plugin="$compose_dir/docker-config/cli-plugins/docker-compose"
fetch_compose() {
  local apt="$compose_dir/apt" arch deb expected
  arch=$(dpkg --print-architecture)
  rm -rf "$apt" "$compose_dir/root"
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial"
  : > "$apt/status"
  echo "deb $DEBIAN_MIRROR $COMPOSE_SUITE main" > "$apt/sources.list"
  local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null
              -o "Dir::State::Lists=$apt/lists" -o "Dir::State::status=$apt/status" -o "Dir::Cache=$apt/cache"
              -o APT::Sandbox::User=root -o "APT::Architecture=$arch")
  echo "fetching docker-compose $COMPOSE_VERSION from Debian $COMPOSE_SUITE (apt-get download; nothing is installed)"
  apt-get -qq "${opts[@]}" update
  (cd "$apt" && apt-get -qq "${opts[@]}" download "docker-compose=$COMPOSE_VERSION")
  deb="$apt/docker-compose_${COMPOSE_VERSION}_${arch}.deb"
  expected="COMPOSE_SHA256_$arch"
  if [ -n "${!expected:-}" ]; then
    echo "${!expected}  $deb" | sha256sum --check --quiet -
  fi
  dpkg-deb -x "$deb" "$compose_dir/root"
  mkdir -p "$(dirname "$compose_plugin")"
  install -m 0755 "$compose_dir/root/usr/libexec/docker/cli-plugins/docker-compose" "$compose_plugin"
  echo "$COMPOSE_VERSION" > "$compose_dir/version"
  rm -rf "$apt" "$compose_dir/root"
}
if [ ! -x "$compose_plugin" ] || [ "$(cat "$compose_dir/version" 2>/dev/null)" != "$COMPOSE_VERSION" ]; then
  fetch_compose
fi
# Debian's docker CLI (docker.io), whatever else is on the PATH, with the plugin above.
docker_cli=/usr/bin/docker
[ -x "$docker_cli" ] || docker_cli=$(command -v docker)

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

export DOCKER_HOST="unix://$sock" TRITONIZE_CONTAINER_TESTS=1 TRITONIZE_CONTAINER_DIR="$dir" \
  DOCKER_CONFIG="$compose_dir/docker-config" TRITONIZE_DOCKER_CLI="$docker_cli"
"$@"
