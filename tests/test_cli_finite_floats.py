"""``serve``, ``hw-search`` and ``map`` take finite numbers only (``cli.common.finite_float``): ``float`` takes
'nan' and 'inf', which ran on (a NaN rate, an infinite area budget) or failed far later naming no flag."""

from __future__ import annotations

import pytest
from tilewright.engine.cli import main
from tilewright.engine.cli.serve import parse_rates
from tilewright.engine.errors import InputError

CASES = [
    (["serve", "llama2-70b-h100-inference"], "--rate"),
    (["serve", "llama2-70b-h100-inference"], "--spec-accept"),
    (["serve", "llama2-70b-h100-inference"], "--spec-draft-cost"),
    (["serve", "llama2-70b-h100-inference"], "--slo-ttft"),
    (["serve", "llama2-70b-h100-inference"], "--slo-tpot"),
    (["hw-search", "--model", "gpt-1.7b", "--power-w", "300"], "--area-mm2"),
    (["hw-search", "--model", "gpt-1.7b", "--area-mm2", "800"], "--power-w"),
    (["hw-search", "--model", "gpt-1.7b", "--area-mm2", "800", "--power-w", "300"], "--link-gbps"),
    (["map", "gpt3-dgx-a100"], "--sram-mb"),
]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("base", "flag"), CASES, ids=[f"{b[0]}{f}" for b, f in CASES])
def test_non_finite_numbers_are_refused_naming_the_flag(capsys, base, flag, value):
    with pytest.raises(SystemExit) as exc:
        main([*base, f"{flag}={value}"])  # "=": argparse reads a bare -inf as an option
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: {value!r}: give a finite number" in err


@pytest.mark.parametrize("text", ["1,nan", "inf", "1:inf:1", "nan:4:1", "1:4:nan"])
def test_a_rate_sweep_of_non_finite_numbers_is_refused(text):
    with pytest.raises(InputError, match="--sweep-rates"):
        parse_rates(text)


def test_finite_rates_still_parse():
    assert parse_rates("0.5:2:0.5") == [0.5, 1.0, 1.5, 2.0]
    assert parse_rates("1,2.5") == [1.0, 2.5]
