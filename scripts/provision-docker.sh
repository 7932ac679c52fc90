#!/usr/bin/env bash
# Gives this machine what the Docker tests need: a Docker engine (Debian's docker.io), a running
# dockerd, a registry-free base image (debootstrap + docker import), the built-in env images, the
# agent image (portal-shm agent) and docker-compose (tests/integration/test_agent_container_compose.py).
# Idempotent; without root or apt it only reports what is missing (the Docker tests then skip).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v dockerd >/dev/null || ! command -v debootstrap >/dev/null; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "provision: docker.io/debootstrap missing and cannot apt-get them here; Docker tests will skip" >&2
    exit 0
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io debootstrap >/dev/null
fi
if ! command -v docker-compose >/dev/null && ! docker compose version >/dev/null 2>&1 \
  && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker-compose >/dev/null \
    || echo "provision: no docker-compose; the compose example's test will skip" >&2
fi

if ! docker info >/dev/null 2>&1; then
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "provision: dockerd did not start, see /var/log/dockerd.log" >&2; exit 1; }
fi

base="${PORTAL_SHM_BASE_IMAGE:-portal-shm/base:bookworm}"
docker image inspect "$base" >/dev/null 2>&1 || portal-shm build base -t "$base"
for image in ${PORTAL_SHM_IMAGES:-ale vizdoom mujoco flappy-bird minigrid retro agent}; do
  portal-shm build "$image" --base "$base"
done
# The legacy runtime (Python 3.9, numpy 1.x, gym 0.26) needs a bullseye base.
if [ "${PORTAL_SHM_LEGACY:-1}" = 1 ]; then
  docker image inspect portal-shm/base:bullseye >/dev/null 2>&1 || portal-shm build base --suite bullseye
  portal-shm build legacy --base portal-shm/base:bullseye
fi
echo "provision: docker ready, base $base, images: ${PORTAL_SHM_IMAGES:-ale vizdoom mujoco flappy-bird minigrid retro agent}"
