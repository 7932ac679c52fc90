"""``portal-shm record ENV --env-index 3 --episodes 2``: a quick look at an env of an image. One
library call: ``portal_shm.RecordVideo`` over ``make_vec``, stepped with random actions."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from .args import add_kwarg_argument, non_negative_int, parse_kwargs, positive_float, positive_int
from .backend_args import BACKEND_NAMES, with_image
from .console import make_console
from .parser import UsageError

console = make_console()


def cmd_record(args: argparse.Namespace) -> int:
    """Record ``--episodes`` episodes of env ``--env-index`` (random actions) as mp4 files."""
    import portal_shm

    if args.env_index >= args.num_envs:
        raise UsageError(
            f"--env-index {args.env_index} is not one of the {args.num_envs} envs: give an index below --num-envs"
        )
    kwargs = with_image(args, parse_kwargs(args.kwarg))
    kwargs.setdefault("render_mode", "rgb_array")
    with console.status(escape(f"starting {args.num_envs} x {args.id} on the {args.backend} backend")):
        envs = portal_shm.make_vec(args.id, args.num_envs, backend=args.backend, **kwargs)
    recorder = portal_shm.RecordVideo(envs, args.folder, env_indices=[args.env_index], fps=args.fps)
    steps = 0
    try:
        recorder.action_space.seed(args.seed)
        recorder.reset(seed=args.seed)
        with console.status(f"recording env {args.env_index}") as status:
            while len(recorder.videos) < args.episodes:
                if steps >= args.max_steps:
                    raise ValueError(
                        f"env {args.env_index} ended {len(recorder.videos)} of {args.episodes} episodes in "
                        f"{steps} steps: raise --max-steps (or bound its episodes, e.g. --kwarg max_episode_steps=500)"
                    )
                recorder.step(recorder.action_space.sample())
                steps += 1
                if steps % 100 == 0:
                    status.update(f"recording env {args.env_index}: episode {len(recorder.videos) + 1}, step {steps}")
    finally:
        recorder.close()
    table = Table(title=escape(f"portal-shm record {args.id} (env {args.env_index} of {args.num_envs})"))
    for column in ("video", "frames"):
        table.add_column(column, justify="right" if column == "frames" else "left")
    for path in recorder.videos[: args.episodes]:
        table.add_row(escape(path), str(recorder.frame_counts[path]))
    console.print(table)
    return 0


def add_record_command(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "record",
        help="record episodes of one env (random actions) as mp4 files",
        description="Step N envs with random actions and record env --env-index's first --episodes episodes "
        "as FOLDER/env{i}-episode{k}.mp4; only that env renders, on its own server. Needs the video extra.",
        epilog="example: portal-shm record ALE/Pong-v5 --env-index 3 --episodes 2 --backend docker --image portal-shm/ale",
    )
    p.add_argument("id", metavar="ENV", help="env id or package.module:callable")
    p.add_argument("--env-index", type=non_negative_int, default=0, help="the env to record, below --num-envs")
    p.add_argument("--episodes", type=positive_int, default=1, help="episodes to record, one mp4 each")
    p.add_argument("-n", "--num-envs", type=positive_int, default=1, help="number of envs stepped together")
    p.add_argument("--folder", default="videos", help="where the mp4 files go (made if missing)")
    p.add_argument("--fps", type=positive_float, default=30.0, help="frame rate of the videos")
    p.add_argument("--backend", default="process", choices=BACKEND_NAMES, help="where the envs run: their runtime")
    p.add_argument("--image", default=None, help="docker backend: the image the envs run in (default: portal-shm/ale)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the envs' reset and of the random actions")
    p.add_argument(
        "--max-steps",
        type=positive_int,
        default=100_000,
        help="give up after this many steps (an env whose episodes never end)",
    )
    add_kwarg_argument(p, "env kwarg (or backend option), typed: int, float, bool, None or str; repeatable")
    p.set_defaults(func=cmd_record)
