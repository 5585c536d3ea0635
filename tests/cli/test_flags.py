"""The library names Python parameters in its errors; the command line names its flags for them."""

from __future__ import annotations

from qkenergy.base.errors import ArgumentError, QKEnergyError, check_integer
from qkenergy.cli.main import cli
from qkenergy.cli.output import flag_message, option_flags

FLAGS = option_flags(cli)


def test_a_leading_parameter_becomes_its_flag() -> None:
    error = ArgumentError("layers: 99-99 is out of range; valid layers are 0..5", parameter="layers")
    assert flag_message(error, FLAGS) == "--layers: 99-99 is out of range; valid layers are 0..5"
    try:
        check_integer(1, "rotation_samples", 2)
    except QKEnergyError as caught:
        assert flag_message(caught, FLAGS) == "--rotation-samples must be an integer >= 2, got 1"
    # a message that does not start with its parameter, or an unknown parameter, is left alone
    assert flag_message(QKEnergyError("2000 samples", parameter="samples"), FLAGS) == "2000 samples"
    assert flag_message(QKEnergyError("x must be 1", parameter="x"), FLAGS) == "x must be 1"
    assert flag_message(QKEnergyError("plain"), FLAGS) == "plain"
    assert all(flag.startswith("--") for flag in FLAGS.values())


def test_the_flags_are_read_from_the_click_declarations() -> None:
    """Every option of every command is found; the library's own names of four map to theirs."""
    flags = FLAGS
    for command in cli.commands.values():
        for param in command.params:
            long = [opt for opt in param.opts if opt.startswith("--")]
            if long and param.name not in ("help",):
                assert flags[str(param.name)] == long[0]
    assert (flags["kind"], flags["null"], flags["layout"], flags["baseline"]) == (
        "--null",
        "--no-null",
        "--layout",
        "--baseline",
    )
    assert (flags["samples"], flags["rotation_samples"], flags["revision"]) == (
        "--samples",
        "--rotation-samples",
        "--revision",
    )
