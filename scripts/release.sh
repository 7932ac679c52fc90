#!/usr/bin/env bash
# Builds the release into DIR: the sdist and wheel of each of this repository's two distributions,
# then checks their metadata (twine check --strict) and that no file is in both wheels.
#   portal-shm-env  the env side (ENV_SIDE in portal_shm/runtimes/env_wheel.py: the package root, version,
#                   presets, wire/, server/, example_envs/): Python >= 3.9, numpy, pyzmq and msgpack only.
#                   It owns portal_shm/__init__.py, so it is what makes portal_shm a package. Its wheel is
#                   env_wheel()'s, byte for byte the one runtimes and images install; its sdist is built
#                   here and checked to make a wheel of the same files.
#   portal-shm      everything else (agent side, CLI, backends, bench, the built-in images as package
#                   data), requiring portal-shm-env of its own version.
# The root pyproject.toml stays the contributors' all-in-one editable project: each sdist is built in a
# staging directory of its own (removed on exit); the version is portal_shm/version.py's.
# Needs build, twine and setuptools (the dev extra has them): the builds run without isolation, in
# this Python ($PYTHON, else python).
# Usage: bash scripts/release.sh DIR
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: bash scripts/release.sh DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python}
if ! "$python" -c "import build, twine, setuptools" 2>/dev/null; then
  echo "release: $python lacks build, twine or setuptools: pip install build twine setuptools" >&2
  exit 1
fi
mkdir -p "$1"
dest=$(cd "$1" && pwd)
stage=$(mktemp -d "${TMPDIR:-/tmp}/psm-release-XXXXXX")
trap 'rm -rf "$stage"' EXIT

version=$(cd "$root" && "$python" - "$root" "$stage" <<'PY'
"""Lays out $stage/env (the env side's sdist project) and $stage/agent (the agent side's); prints the version."""
import shutil
import sys
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

root, stage = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, str(root))
from portal_shm.runtimes import env_wheel as env  # the checkout's, not an installed one

package = root / "portal_shm"
version = env.__version__
skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def replaced(text, old, new):
    if old not in text:
        sys.exit(f"release: pyproject.toml no longer has {old.strip()!r}: update scripts/release.sh")
    return text.replace(old, new, 1)


# The env side's sdist: the files env_wheel puts in its wheel and a pyproject.toml of the same metadata.
project = stage / "env"
for name, path in env.server_modules().items():
    (project / "portal_shm" / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, project / "portal_shm" / name)
quoted = ", ".join(f'"{r}"' for r in env.REQUIRES)
(project / "README.md").write_text(env.DESCRIPTION)
(project / "pyproject.toml").write_text(f"""[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "{env.DIST_NAME}"
version = "{version}"
description = "{env.SUMMARY}"
readme = "README.md"
requires-python = "{env.REQUIRES_PYTHON}"
license = {{ text = "MIT" }}
classifiers = ["License :: OSI Approved :: MIT License", "Programming Language :: Python :: 3"]
dependencies = [{quoted}]

[tool.setuptools.packages.find]
include = ["portal_shm*"]
""")

# The agent side: the package less the env side's files, and the root pyproject.toml with a static
# version (version.py is the env side's) and the env side of the same version as a dependency.
project = stage / "agent"
env_side = set(env.ENV_SIDE)


def agent_skip(folder, names):
    top = [n for n in names if n in env_side] if Path(folder) == package else []
    return top + list(skip(folder, names))


shutil.copytree(package, project / "portal_shm", ignore=agent_skip)
shutil.copy2(root / "README.md", project / "README.md")
text = (root / "pyproject.toml").read_text()
text = replaced(text, 'dynamic = ["version"]\n', f'version = "{version}"\n')
text = replaced(text, '[tool.setuptools.dynamic]\nversion = { attr = "portal_shm.version.__version__" }\n', "")
text = replaced(text, "dependencies = [\n", f'dependencies = [\n  "{env.DIST_NAME}=={version}",\n')
staged = tomllib.loads(text)["project"]
assert staged["version"] == version and f"{env.DIST_NAME}=={version}" in staged["dependencies"], staged
(project / "pyproject.toml").write_text(text)
print(version)
PY
)

# Each side's sdist, and a wheel made from it (python -m build's default): the agent's wheel is the
# release's, the env side's only checks that its sdist makes the wheel env_wheel makes.
for side in env agent; do
  echo "release: building the $side side's sdist and its wheel"
  (cd "$stage/$side" && "$python" -m build --no-isolation --outdir "$stage/dist-$side" . >"$stage/build-$side.log" 2>&1) || {
    tail -n 40 "$stage/build-$side.log" >&2
    echo "release: building the $side side failed" >&2
    exit 1
  }
done
cp "$stage/dist-env/portal_shm_env-$version.tar.gz" "$stage"/dist-agent/* "$dest/"
(cd "$root" && "$python" -c "import sys; from portal_shm.runtimes.env_wheel import env_wheel; env_wheel(sys.argv[1])" "$dest")

built=("$dest/portal_shm_env-$version.tar.gz" "$dest/portal_shm_env-$version-py3-none-any.whl"
  "$dest/portal_shm-$version.tar.gz" "$dest/portal_shm-$version-py3-none-any.whl")
"$python" -m twine check --strict "${built[@]}"
"$python" - "${built[1]}" "${built[3]}" "$stage/dist-env/portal_shm_env-$version-py3-none-any.whl" <<'PY'
"""No file in both wheels (one would overwrite the other's); the env sdist builds env_wheel's files."""
import sys
import zipfile


def files(path):
    return {n for n in zipfile.ZipFile(path).namelist() if ".dist-info/" not in n}


env, agent, from_sdist = (files(p) for p in sys.argv[1:])
both = sorted(env & agent)
if both:
    sys.exit(f"release: {len(both)} file(s) in both wheels: {', '.join(both[:10])}")
if from_sdist != env:
    sys.exit(f"release: the env sdist's wheel differs from env_wheel's in {sorted(from_sdist ^ env)[:10]}")
print(f"release: {len(env)} files in the env wheel, {len(agent)} in the agent wheel, none in both")
PY
ls -l "${built[@]}"
