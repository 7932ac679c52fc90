#!/usr/bin/env bash
# The release as a user gets it: installs DIR's wheels (scripts/release.sh DIR) into a fresh venv,
# outside this checkout (no source tree on sys.path), and uses them:
#   1. portal-shm --version, and portal_shm imported from the venv's site-packages;
#   2. portal-shm run CartPole-v1 on the process backend (README's main command);
#   3. a venv runtime (the env side installed into it from the installed package);
#   4. portal-shm build --list, portal-shm build ale from the wheel's package data, Pong in containers;
#   5. the env side alone on Python 3.9: an image FROM the bullseye base (portal-shm build base --suite
#      bullseye) with only DIR's portal-shm-env wheel and gymnasium, serving CartPole to this agent.
# Steps 4-5 need Docker (and the bullseye base, built here when missing, as root with debootstrap):
# without it they are skipped, or fail with PORTAL_SHM_REQUIRE_DOCKER=1 (CI).
# pip reaches the registries as this machine's pip config says, pinned by constraints.txt like .ci/run.
# Usage: bash scripts/wheel_smoke.sh DIR
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash scripts/wheel_smoke.sh DIR (made by scripts/release.sh DIR)" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
dist=$(cd "$1" && pwd)
wheels=("$dist"/portal_shm-*-py3-none-any.whl)
if [ ${#wheels[@]} -ne 1 ] || [ ! -f "${wheels[0]}" ]; then
  echo "wheel smoke: $dist needs exactly one portal-shm wheel (bash scripts/release.sh $dist)" >&2
  exit 1
fi
version=$(basename "${wheels[0]}" | cut -d- -f2)
env_wheel="$dist/portal_shm_env-$version-py3-none-any.whl"
[ -f "$env_wheel" ] || { echo "wheel smoke: no $env_wheel" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/psm-smoke-XXXXXX")
trap 'rm -rf "$work"' EXIT  # (the images stay, tagged portal-shm-smoke/*: a rerun builds from their layers)
mkdir "$work/tmp"
export TMPDIR="$work/tmp" PORTAL_SHM_CACHE="$work/cache"  # what the steps make stays in $work
unset PYTHONPATH
cd "$work"
started=$SECONDS
step() { echo "::: wheel smoke ($((SECONDS - started)) s): $*"; }

step "a fresh venv, portal-shm[docker,atari]==$version from $dist"
"${PYTHON:-python3}" -m venv venv
. venv/bin/activate
pip install -q --find-links "$dist" "portal-shm[docker,atari]==$version" -c "$root/constraints.txt"
where=$(python -c "import portal_shm; print(portal_shm.__file__)")
site=$(python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
case "$where" in
  "$site"/*) echo "portal_shm from $where" ;;
  *) echo "wheel smoke: portal_shm imported from $where, not from $site" >&2; exit 1 ;;
esac

step "portal-shm --version"
portal-shm --version | tee "$work/version"
grep -q "^portal-shm $version (env-side protocol [0-9]*)$" "$work/version"

step "portal-shm run CartPole-v1 on the process backend"
portal-shm run CartPole-v1 --num-envs 4 --seconds 2

step "a venv runtime: the last gym under numpy 1.x, the env side from the installed package"
python - <<'PY'
import portal_shm

envs = portal_shm.make_vec("CartPole-v1", 2, backend="venv", requirements=["numpy<2", "gym==0.26.2"])
envs.reset(seed=0)
for _ in range(20):
    envs.step(envs.action_space.sample())
print("venv runtime:", envs.servers[0]["runtime"])
envs.close()
PY

step "portal-shm build --list"
portal-shm build --list | tee "$work/images"
grep -q "^ale " "$work/images"

if ! docker info >/dev/null 2>&1; then
  if [ "${PORTAL_SHM_REQUIRE_DOCKER:-0}" = 1 ]; then
    echo "wheel smoke: no Docker engine, and PORTAL_SHM_REQUIRE_DOCKER=1" >&2
    exit 1
  fi
  step "no Docker engine: image builds and containers skipped (ok, $((SECONDS - started)) s)"
  exit 0
fi

step "portal-shm build ale (from the wheel's package data), then Pong in 2 containers"
portal-shm build ale -t portal-shm-smoke/ale
portal-shm run ALE/Pong-v5 --num-envs 2 --seconds 3 --backend docker --image portal-shm-smoke/ale

step "the env side alone on Python 3.9: portal-shm-env $version in a bullseye image"
if ! docker image inspect portal-shm/base:bullseye >/dev/null 2>&1; then
  portal-shm build base --suite bullseye
fi
mkdir -p env39/release
cp "$env_wheel" env39/release/
cat >env39/Dockerfile <<'DOCKERFILE'
# Debian bullseye's Python 3.9 with the released portal-shm-env wheel and gymnasium: nothing else.
ARG BASE_IMAGE=portal-shm/base:bullseye
FROM ${BASE_IMAGE} AS build
COPY _pip/ /tmp/pip/
ENV PIP_CONFIG_FILE=/tmp/pip/pip.conf PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir numpy pyzmq msgpack gymnasium
COPY release/ /tmp/release/
RUN /opt/venv/bin/pip install --no-cache-dir --no-index --find-links /tmp/release portal-shm-env

FROM ${BASE_IMAGE}
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH PYTHONUNBUFFERED=1
RUN python -c "import sys, portal_shm.server; assert sys.version_info[:2] == (3, 9), sys.version" \
 && ! python -c "import portal_shm.cli" 2>/dev/null
LABEL portal-shm.default-env="CartPole-v1"
CMD ["python", "-m", "portal_shm.server"]
DOCKERFILE
portal-shm build ./env39 -t portal-shm-smoke/env39 --base portal-shm/base:bullseye
python - <<'PY'
import portal_shm
from portal_shm.backends import DockerBackend

envs = portal_shm.make_vec("CartPole-v1", 2, backend=DockerBackend(image="portal-shm-smoke/env39"))
envs.reset(seed=0)
steps = 0
for _ in range(100):
    envs.step(envs.action_space.sample())
    steps += 2
print(f"Python 3.9 env side: {steps} CartPole steps from", envs.servers[0]["runtime"])
envs.close()
PY
step "ok"
