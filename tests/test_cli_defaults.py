"""One default per option: where a command's option is a field of the package's dataclass config,
the command line's default is the field's (and `TrainHeadCommand`'s are `TrainConfig`'s)."""
import dataclasses

import pytest

from eagle_mini.cli import build_parser
from eagle_mini.cli.common import Parser
from eagle_mini.experiments.ablation import AblationConfig
from eagle_mini.training.commands import TrainHeadCommand
from eagle_mini.training.train import TrainConfig

# command -> (its config, the options (dests) whose None default means "the config's value")
CONFIGS = {"train-head": (TrainHeadCommand, ()),
           "experiment": (AblationConfig, tuple(f.name for f in dataclasses.fields(AblationConfig)))}
# TrainHeadCommand fields that are TrainConfig fields under another name
TRAIN_CONFIG_NAMES = {"warmup": "warmup_steps"}
# TrainHeadCommand fields whose empty default means "chosen for the target or head", not a value
CHOSEN_LATER = {"lr": "training.train.default_lr of the target's hidden size",
                "unroll": "1 for an EAGLE-1 head, 7 for an EAGLE-3 head",
                "feature_dtype": "the target's own dtype (TrainConfig's '')"}


def subparser(parser, command: str):
    for action in parser._subparsers._group_actions:
        return action.choices[command]
    raise AssertionError(f"no command {command}")


def field_defaults(cls) -> dict:
    return {f.name: f.default for f in dataclasses.fields(cls)
            if f.default is not dataclasses.MISSING}


def disagreements(parser, cls, none_means_config=()) -> list[str]:
    """Options of `parser` whose dest is a field of `cls` and whose default differs from the
    field's (a None default of an option in `none_means_config` stands for the config's value)."""
    fields = field_defaults(cls)
    out = []
    for action in parser._actions:
        if action.dest not in fields or action.default is None and action.dest in none_means_config:
            continue
        if action.default != fields[action.dest]:
            out.append(f"{'/'.join(action.option_strings) or action.dest}: command line "
                       f"{action.default!r}, {cls.__name__}.{action.dest} {fields[action.dest]!r}")
    return out


@pytest.mark.parametrize("command", sorted(CONFIGS))
def test_every_option_that_is_a_config_field_has_the_fields_default(command):
    cls, none_means_config = CONFIGS[command]
    sub = subparser(build_parser(), command)
    assert disagreements(sub, cls, none_means_config) == []
    mapped = {a.dest for a in sub._actions} & set(field_defaults(cls))
    assert len(mapped) >= (20 if cls is TrainHeadCommand else 10), mapped


def test_train_head_commands_defaults_are_the_trainers():
    train = field_defaults(TrainConfig)
    shared = {f: TRAIN_CONFIG_NAMES.get(f, f) for f in field_defaults(TrainHeadCommand)}
    shared = {f: t for f, t in shared.items() if t in train}
    assert {"ckpt_every", "steps", "warmup", "seed", "log_every"} <= set(shared)
    for field, trainer_field in shared.items():
        default = getattr(TrainHeadCommand, field)
        if field in CHOSEN_LATER:
            assert default is None, field
            continue
        assert default == train[trainer_field], field
    assert subparser(build_parser(), "train-head").get_default("ckpt_every") == TrainConfig.ckpt_every


def test_a_planted_disagreement_is_found():
    p = Parser()
    p.add_argument("--ckpt-every", type=int, default=50)
    p.add_argument("--steps", type=int, default=TrainHeadCommand.steps)
    p.add_argument("--lr", type=float, default=None)
    assert disagreements(p, TrainHeadCommand) == [
        f"--ckpt-every: command line 50, TrainHeadCommand.ckpt_every {TrainConfig.ckpt_every!r}"]
    q = Parser()
    q.add_argument("--epochs", type=int, default=None)
    assert disagreements(q, AblationConfig) == [
        f"--epochs: command line None, AblationConfig.epochs {AblationConfig.epochs!r}"]
    assert disagreements(q, AblationConfig, ("epochs",)) == []


def test_the_parsed_options_make_the_config():
    from eagle_mini.cli.heads import train_head_command
    args = build_parser().parse_args(["train-head", "--stream", "--out", "h", "--no-fc-bias",
                                      "--warmup", "7"])
    cmd = train_head_command(args)
    assert cmd == TrainHeadCommand(out="h", warmup=7, fc_bias=False)
    assert cmd.ckpt_every == TrainConfig.ckpt_every
