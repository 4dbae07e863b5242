"""Shared pieces of the data model: the strict base class, data types and unit-carrying number types."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Base of every IR model: unknown keys are errors, so a typo in a project file is reported, not ignored."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True)


class DType(StrEnum):
    """Numeric formats a run can use; the value is the name used in files and on the command line."""

    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"


BYTES_PER_ELEMENT: dict[DType, int] = {
    DType.fp32: 4,
    DType.tf32: 4,
    DType.bf16: 2,
    DType.fp16: 2,
    DType.fp8: 1,
    DType.int8: 1,
}


def dtype_bytes(dtype: DType | str) -> int:
    """Bytes of one element of ``dtype``."""
    return BYTES_PER_ELEMENT[DType(dtype)]


# Unit-carrying aliases: the name says the unit, the constraint says what is physical.
Bytes = Annotated[float, Field(ge=0, description="bytes")]
PositiveBytes = Annotated[float, Field(gt=0, description="bytes")]
BytesPerSecond = Annotated[float, Field(gt=0, description="bytes per second, per direction")]
FlopsPerSecond = Annotated[float, Field(gt=0, description="floating-point operations per second")]
Seconds = Annotated[float, Field(ge=0, description="seconds")]
Fraction = Annotated[float, Field(gt=0, le=1, description="fraction in (0, 1]")]
PicojoulesPerByte = Annotated[float, Field(ge=0, description="picojoules per byte")]
PicojoulesPerBit = Annotated[float, Field(ge=0, description="picojoules per bit")]
SquareMillimetres = Annotated[float, Field(ge=0, description="mm²")]
Watts = Annotated[float, Field(ge=0, description="watts")]
Dollars = Annotated[float, Field(ge=0, description="US dollars")]
Count = Annotated[int, Field(ge=1)]
