"""Command line: `python -m eagle_mini COMMAND` (also installed as `eagle-mini`).

Every user error ends as one line on stderr and exit code 2; `--json` outputs are one JSON object
for scripts and graders.

Each command's options sit beside its handler, in the module of its group: `decode` (generate,
demo, bench, ...), `heads` (train-head, eval-head, export, ...), `experiments`, `tooling`
(results-md, rehearse, assignments, student-repo, test-browser). `common` holds what they share. A handler turns
the parsed options into the package's plain arguments or dataclass configs (`train-head`:
`training.commands.TrainHeadCommand`): no argparse Namespace leaves this package, and an option
that is a config's field takes the config's default.
"""
import sys

from eagle_mini.cli import decode, experiments, heads, tooling
from eagle_mini.cli.common import Parser, head_for, load, positive_int, share, tree_arg
from eagle_mini.errors import EagleMiniError

__all__ = ["Parser", "build_parser", "head_for", "load", "main", "positive_int", "share",
           "tree_arg"]

GROUPS = (decode, heads, experiments, tooling)

# torch's out-of-memory error while a command runs (loading has its own line, `models.load_error`).
OUT_OF_MEMORY = ("out of GPU memory: try a shorter --max-new-tokens or a smaller tree, bf16 instead "
                 "of fp32, or a GPU with more memory (README.md, 'On a GPU')")


def build_parser() -> Parser:
    """Every command, registered by its group's module (`register(sub)`)."""
    parser = Parser(prog="eagle-mini", description="EAGLE speculative decoding, small and tested.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()   # a command's output is its own: no hub advice, no bars
    hf_logging.disable_progress_bar()
    try:
        code = args.handler(args)
    except EagleMiniError as e:
        print(f"eagle-mini: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("eagle-mini: interrupted", file=sys.stderr)
        return 130
    except RuntimeError as e:
        if type(e).__name__ != "OutOfMemoryError":  # torch's (CUDA) out-of-memory error
            raise
        print(f"eagle-mini: error: {OUT_OF_MEMORY}", file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0
