"""The library names Python parameters in its errors; the command line names its flags for them."""

from __future__ import annotations

from qkenergy.base.errors import ArgumentError, QKEnergyError, check_integer
from qkenergy.cli.output import FLAGS, flag_message


def test_a_leading_parameter_becomes_its_flag() -> None:
    error = ArgumentError("layers: 99-99 is out of range; valid layers are 0..5", parameter="layers")
    assert flag_message(error) == "--layers: 99-99 is out of range; valid layers are 0..5"
    try:
        check_integer(1, "rotation_samples", 2)
    except QKEnergyError as caught:
        assert flag_message(caught) == "--rotation-samples must be an integer >= 2, got 1"
    # a message that does not start with its parameter, or an unknown parameter, is left alone
    assert flag_message(QKEnergyError("2000 samples", parameter="samples")) == "2000 samples"
    assert flag_message(QKEnergyError("x must be 1", parameter="x")) == "x must be 1"
    assert flag_message(QKEnergyError("plain")) == "plain"
    assert all(flag.startswith("--") for flag in FLAGS.values())
