"""FSDP over a project that asks for another ZeRO stage: the refusal says what to change."""

import pytest
from pydantic import ValidationError
from tilewright.engine.ir import Mapping


@pytest.mark.parametrize("zero", [1, 2])
def test_fsdp_with_a_lower_zero_stage_names_the_fix(zero: int) -> None:
    with pytest.raises(ValidationError) as exc:
        Mapping(fsdp=True, zero=zero)
    text = str(exc.value)
    assert f"not stage {zero}" in text and "--zero 3" in text and "leave it unset" in text


@pytest.mark.parametrize("zero", [None, 0, 3])
def test_fsdp_is_stage_3(zero: int | None) -> None:
    m = Mapping(fsdp=True) if zero is None else Mapping(fsdp=True, zero=zero)
    assert m.zero == 3
