"""The ``--backend`` and ``--image`` arguments the commands that make envs share (``run``, ``tune``,
``record``): one module below them all, so none imports another command's module."""

from __future__ import annotations

import argparse

from .console import make_console
from .parser import UsageError

err_console = make_console(stderr=True)

BACKEND_NAMES = ("process", "venv", "micromamba", "docker", "attach", "remote", "ray")
# Backends whose envs run in a container image, so that ``run --image`` means something to them.
IMAGE_BACKENDS = ("docker", "remote", "ray")


def with_image(args: argparse.Namespace, kwargs: dict) -> dict:
    """``kwargs`` plus ``image=`` from ``--image``; on the docker backend without one, the default
    image, named on stderr (an Atari image quietly running someone's ViZDoom id fails confusingly)."""
    if args.image:
        if args.backend not in IMAGE_BACKENDS:
            raise UsageError(
                f"--image {args.image} names the container image of the docker backend; --backend {args.backend} "
                "runs no image: add --backend docker (or drop --image)"
            )
        return {**kwargs, "image": args.image}
    if args.backend == "docker" and "image" not in kwargs:
        from ..runtimes.docker import DEFAULT_IMAGE

        err_console.print(
            f"note: the envs run in {DEFAULT_IMAGE}: choose the image with --image", highlight=False, markup=False
        )
        return {**kwargs, "image": str(DEFAULT_IMAGE)}
    return kwargs
