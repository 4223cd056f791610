"""The `tinygrad-attn` command (also `python -m tinygrad_attn`): train, tasks, attend."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import sys

from .tasks import TASKS


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line and exit code 2, like every other bad argument here
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tinygrad-attn", description="Train and inspect small attention models on toy tasks.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    train = commands.add_parser("train", help="train a model on a toy task")
    train.add_argument("--task", default="reverse", help=f"one of: {', '.join(TASKS)} (default: reverse)")
    train.add_argument("--steps", type=int, help="at most this many steps (default: the task's)")
    train.add_argument("--batch-size", type=int)
    train.add_argument("--lr", type=float, help="peak learning rate (default: the task's)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", help="run folder (default: runs/<task>)")
    train.add_argument("--checkpoint-every", type=int, default=200, help="write checkpoint.npz every K steps")
    train.add_argument("--resume", action="store_true", help="continue from the run folder's checkpoint")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run the folder holds (without it, a folder with a run is refused)")
    train.add_argument("--threads", type=int, default=1,
                       help="threads for tinygrad_attn's parallel work, BLAS then on one (default 1)")
    train.add_argument("--target", type=float,
                       help="stop at this held-out accuracy (the text task: at this validation loss or below)")
    train.add_argument("--data", help="the text task's UTF-8 file (default: the standard library's docstrings)")
    train.add_argument("--block-size", type=int, help="the text task's window of characters (default 64)")
    train.add_argument("--d-model", type=int, help="model width (default: the task's)")
    train.add_argument("--heads", type=int, help="attention heads (default: the task's)")
    train.add_argument("--layers", type=int, help="layers (default: the task's)")
    train.add_argument("--dim-feedforward", type=int, help="feed-forward width (default: the task's)")
    train.add_argument("--dropout", type=float, help="dropout (default: the task's, 0)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--no-plot", action="store_true", help="do not draw attention.png")
    train.add_argument("--snapshots", type=int, default=0,
                       help="keep the sample prompt's attention maps at N steps, for `explain`'s slider")

    commands.add_parser("tasks", help="list the tasks and their defaults")

    generate = commands.add_parser("generate", help="continue a prompt with a trained model (KV cache)")
    generate.add_argument("--run", required=True, help="a run folder written by `train`")
    generate.add_argument("--prompt", required=True, help="the text to continue (the text task), or a task's input")
    generate.add_argument("--tokens", type=int, default=200, help="how many characters to generate (text task)")
    generate.add_argument("--temperature", type=float, default=1.0)
    generate.add_argument("--top-k", type=int, help="sample among the k most likely (1: greedy)")
    generate.add_argument("--seed", type=int, default=0)

    explain = commands.add_parser("explain", help="write one HTML page of a run's attention: forward, "
                                  "backward, graph, training")
    explain.add_argument("--run", required=True, help="a run folder written by `train`")
    explain.add_argument("--input", required=True, help='the prompt, e.g. "3 1 4 1 5 9 2 6"')
    explain.add_argument("--out", default="explain.html", help="the page to write (default: explain.html)")
    explain.add_argument("--no-check", action="store_true", help="skip the finite-difference check")
    explain.add_argument("--lang", choices=("en", "fr"),
                         help="the page's language (default: the locale's, LANG=fr_FR... gives French)")
    attend = commands.add_parser("attend", help="answer one input with a trained model and draw its attention")
    attend.add_argument("--run", required=True, help="a run folder written by `train`")
    attend.add_argument("--input", required=True, help='the prompt, e.g. "3 1 4 1 5 9 2 6"')
    attend.add_argument("--head", help="draw one head large, with the weight in each cell: LAYER.HEAD, e.g. 0.1")
    return parser


def _train(args: argparse.Namespace) -> None:
    from . import runtime
    from .explorer.snapshots import Snapshots
    from .runs import CHECKPOINT, TrainConfig
    from .train import train
    from .viz import Pictures

    if args.task not in TASKS:
        raise ValueError(f"--task: unknown task {args.task!r}; choose one of: {', '.join(TASKS)}")
    if args.snapshots < 0:
        raise ValueError(f"--snapshots must be >= 0, got {args.snapshots}")
    for name in ("steps", "batch_size", "checkpoint_every"):
        value = getattr(args, name)
        if value is not None and (value < 0 or (value == 0 and name != "steps")):
            raise ValueError(f"--{name.replace('_', '-')} must be positive, got {value}")
    if args.lr is not None and not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {args.lr}")
    if args.target is not None and args.task != "text" and not 0.0 <= args.target <= 1.0:  # NaN fails this too
        raise ValueError(f"--target must be an accuracy in [0, 1], got {args.target}")
    if args.target is not None and args.task == "text" and not (math.isfinite(args.target) and args.target >= 0):
        raise ValueError(f"--target must be a validation loss >= 0, got {args.target}")
    if args.seed < 0:
        raise ValueError(f"--seed must be a non-negative int, got {args.seed}")
    for flag, value in (("--out", args.out), ("--data", args.data)):
        if value is not None and not value.strip():
            raise ValueError(f"{flag}: an empty path names nothing; leave {flag} out for the default")
    for name in ("block_size", "d_model", "heads", "layers", "dim_feedforward"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    if args.dropout is not None and not 0.0 <= args.dropout < 1.0:  # NaN fails this too
        raise ValueError(f"--dropout must lie in [0, 1), got {args.dropout}")
    out = _out(args)
    if args.resume and not os.path.exists(os.path.join(out, CHECKPOINT)):
        raise ValueError(f"--resume: no checkpoint.npz in {out}")
    if args.resume and args.overwrite:
        raise ValueError("--resume and --overwrite contradict each other: continue the run, or replace it")
    if not args.resume and not args.overwrite and os.path.exists(os.path.join(out, CHECKPOINT)):
        # a trained model is the user's work: never replaced without being asked
        raise ValueError(f"{out} already holds a run (checkpoint.npz): continue it with --resume, train into "
                         "another folder with --out, or replace it with --overwrite")
    _check_out(out)
    if args.threads < 1:
        raise ValueError(f"--threads must be at least 1, got {args.threads}")
    runtime.configure(threads=args.threads)  # the process settings a training run wants: see runtime.py
    if args.task != "text" and (args.data is not None or args.block_size is not None):
        raise ValueError(f"--data and --block-size are for the text task, not {args.task!r}")
    config = TrainConfig(task=args.task, steps=args.steps, batch_size=args.batch_size, lr=args.lr, seed=args.seed,
                         out=out, checkpoint_every=args.checkpoint_every, resume=args.resume, target=args.target,
                         progress=not args.no_progress, data=args.data,
                         block_size=args.block_size, d_model=args.d_model, nhead=args.heads, num_layers=args.layers,
                         dim_feedforward=args.dim_feedforward, dropout=args.dropout)
    pictures = None if args.no_plot else Pictures()
    callbacks = [c for c in (pictures, Snapshots(args.snapshots) if args.snapshots else None) if c is not None]
    try:
        metrics = train(config, callbacks)
    except MemoryError as err:  # a size too large for this machine: say which flags set it
        given = [f"{flag} {getattr(args, name)}" for name, flag in _SIZE_FLAGS if getattr(args, name) is not None]
        raise MemoryError(f"{', '.join(given) or 'the task default sizes'}: {err}") from None
    written = ["checkpoint.npz", "metrics.json", *(pictures.written if pictures else []),
               *(["snapshots.npz"] if args.snapshots else [])]
    print(summary(metrics) + f"; wrote {os.path.join(out, '')}{{{', '.join(written)}}}")


_SIZE_FLAGS = (("batch_size", "--batch-size"), ("block_size", "--block-size"), ("d_model", "--d-model"),
               ("heads", "--heads"), ("layers", "--layers"), ("dim_feedforward", "--dim-feedforward"))


def _out(args: argparse.Namespace) -> str:
    from .runs import default_out

    return args.out or default_out(args.task)


def summary(metrics: dict) -> str:
    """One line: what the run reached, at which step of how many, whether it stopped early, and its time."""
    metric, value, target = metrics["metric"], metrics.get(metrics["metric"]), metrics["target"]
    shown = "n/a" if value is None else f"{value:.4f}" if metric == "val_loss" else f"{value:.3f}"
    reached = "reached" if metrics["reached_target"] else "did not reach"
    stop = (f"stopped early at step {metrics['steps']} of {metrics['planned_steps']}" if metrics["stopped_early"]
            else f"{metrics['steps']} steps")
    return (f"{metrics['task']}: {metric} {shown} ({reached} the target {target}), {stop}, "
            f"{metrics['seconds']:.1f} s")


def _check_out(out: str) -> None:
    """--out must be a folder this process can create and write in."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out: {out} is a file, not a folder")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as err:
        raise ValueError(f"--out: cannot create the folder {out} ({err.strerror})") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise ValueError(f"--out: the folder {out} is not writable")


def _tasks() -> None:
    for name, cls in TASKS.items():
        d = cls.defaults
        print(f"{name:<10} {cls.description}")
        print(f"{'':<10} steps {d.steps}, batch {d.batch_size}, lr {d.lr}, d_model {d.d_model}, "
              f"{d.nhead} heads, {d.num_layers} layers, target {d.target}" +
              "".join(f", {k} {v}" for k, v in d.options.items()))


def _attend(args: argparse.Namespace) -> None:
    from .runs import load_run
    from .viz import check_head, plot_attention

    task, model, _ = load_run(args.run)
    if args.head is not None:  # checked before any answer is printed
        check_head(args.head, model)
    path = os.path.join(args.run, "attend.png")
    if not os.access(args.run, os.W_OK):
        raise ValueError(f"--run: cannot write the picture {path}: the folder is not writable")
    answer, batch = task.answer(model, args.input)
    print(answer)
    title = f"input: {args.input!r:.60}  answer: {answer!r:.60}"
    path = plot_attention(task, model, batch, path, head=args.head, title=title)
    if path:
        print(f"wrote {path}")


def _explain(args: argparse.Namespace) -> None:
    from .explorer import explore_run

    if not args.out.strip():
        raise ValueError("--out: an empty path names nothing")
    folder = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise ValueError(f"--out: cannot write {args.out}: the folder {folder} does not exist or is not writable")
    page = explore_run(args.run, args.input, check=not args.no_check, lang=args.lang)
    page.save(args.out)
    print(f"wrote {args.out}: {page.stats['bytes']} bytes, built in {page.stats['build_seconds']} s")


def _generate(args: argparse.Namespace) -> None:
    from . import rng
    from .runs import load_run

    if args.tokens < 0:
        raise ValueError(f"--tokens must be >= 0, got {args.tokens}")
    if args.seed < 0:
        raise ValueError(f"--seed must be a non-negative int, got {args.seed}")
    if not (math.isfinite(args.temperature) and args.temperature > 0):  # checked for every task
        raise ValueError(f"--temperature must be a finite number > 0, got {args.temperature}")
    if args.top_k is not None and args.top_k < 1:
        raise ValueError(f"--top-k must be at least 1, got {args.top_k}")
    task, model, _ = load_run(args.run)
    model.eval()
    if task.name != "text":  # a built-in task: its answer to the prompt, as `attend` gives it
        answer, _ = task.answer(model, args.prompt)
        print(answer)
        return
    rng.manual_seed(args.seed)
    prompt = task.encode(args.prompt)
    if prompt.size == 0:
        raise ValueError("--prompt: give at least one character")
    try:
        out = model.generate(prompt[None, :], args.tokens, temperature=args.temperature, top_k=args.top_k)[0]
    except MemoryError as err:
        raise MemoryError(f"--tokens {args.tokens}: {err}") from None
    print(args.prompt + task.decode(out[prompt.size :]))


def _interrupted(args: argparse.Namespace, argv: list[str]) -> int:
    """Ctrl-C: one line naming what is on disk and how to go on; exit 130 as a shell reports SIGINT."""
    if args.command == "train":
        checkpoint = os.path.join(_out(args), "checkpoint.npz")
        if os.path.exists(checkpoint):
            again = " ".join(shlex.quote(a) for a in argv if a != "--resume")
            print(f"tinygrad-attn: interrupted; the last checkpoint, {checkpoint}, is intact; continue with: "
                  f"tinygrad-attn {again} --resume", file=sys.stderr)
            return 130
        print("tinygrad-attn: interrupted before the first checkpoint; nothing was saved", file=sys.stderr)
        return 130
    print("tinygrad-attn: interrupted", file=sys.stderr)
    return 130


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            _train(args)
        elif args.command == "tasks":
            _tasks()
        elif args.command == "generate":
            _generate(args)
        elif args.command == "explain":
            _explain(args)
        else:
            _attend(args)
    except KeyboardInterrupt:
        return _interrupted(args, argv)
    except (ValueError, TypeError, KeyError, IndexError, OSError, RuntimeError, MemoryError) as err:
        message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        if isinstance(err, MemoryError) and not message:
            message = "not enough memory for this size; lower --batch-size, --d-model or --dim-feedforward"
        message = " ".join(message.split())  # one line
        if len(message) > 300:  # a huge input is not echoed whole
            message = message[:297] + "..."
        print(f"tinygrad-attn: error: {message}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
