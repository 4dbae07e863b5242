"""Shared pieces of the data model: the strict base class, data types and unit-carrying number types."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field


class StrictModel(BaseModel):
    """Base of every IR model: unknown keys are errors, so a typo in a project file is reported, not ignored."""

    model_config = ConfigDict(
        extra="forbid", validate_assignment=True, populate_by_name=True, allow_inf_nan=False  # JSON has no inf
    )


class QuietDefaultsModel(StrictModel):
    """A model that gained optional fields after files were written. The fields named in ``_quiet`` are left
    out of a dump while they hold their default, so an old project file, and every preset generated from one,
    saves back byte for byte; a file that sets them keeps them. Done with pydantic's own ``exclude_if`` at
    class creation, so dumping stays in pydantic-core (a wrap serializer made each dump 3× slower)."""

    _quiet: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        if not cls._quiet:
            return
        for name in cls._quiet:
            info = cls.model_fields[name]
            info.exclude_if = _equals(info.get_default(call_default_factory=True))
        cls.model_rebuild(force=True, raise_errors=False)  # a later forward reference: rebuilt on first use


def _equals(default: Any) -> Any:
    return lambda value: value == default


class DType(StrEnum):
    """Numeric formats a run can use; the value is the name used in files and on the command line."""

    fp32 = "fp32"
    tf32 = "tf32"
    bf16 = "bf16"
    fp16 = "fp16"
    fp8 = "fp8"
    int8 = "int8"
    bfp8 = "bfp8"  # block float: 8-bit sign+mantissa per element, one shared 8-bit exponent per 16 elements
    bfp4 = "bfp4"  # block float: 4-bit sign+mantissa per element, one shared 8-bit exponent per 16 elements


#: Bytes per element: the one table every byte count in the engine comes from. Block floats are counted as
#: stored in 32 × 32 tiles (tt-metal constants.hpp: BFLOAT8_B_TILE_HW = 1024 + 64 = 1088 B, BFLOAT4_B_TILE_HW
#: = 512 + 64 = 576 B per 1,024 elements), so they are fractions; plain formats stay exact integers.
BYTES_PER_ELEMENT: dict[DType, float] = {
    DType.fp32: 4,
    DType.tf32: 4,
    DType.bf16: 2,
    DType.fp16: 2,
    DType.fp8: 1,
    DType.int8: 1,
    DType.bfp8: 1088 / 1024,
    DType.bfp4: 576 / 1024,
}


def dtype_bytes(dtype: DType | str) -> float:
    """Bytes of one element of ``dtype`` (an int for the plain formats, 1.0625 / 0.5625 for bfp8 / bfp4). A
    ``DType`` is a string enum, so its plain name finds its entry directly (the cost model asks this ~10⁶ times
    per search); only a name that is not one is converted, and refused there."""
    try:
        return BYTES_PER_ELEMENT[dtype]  # type: ignore[index]
    except KeyError:
        return BYTES_PER_ELEMENT[DType(dtype)]


class PrefillOrder(StrEnum):
    """How a serving runtime prefills a batch of requests that arrive together. ``batched``: one prefill of the
    whole batch (vLLM, TensorRT-LLM), every sequence's first token at its end. ``sequential``: one sequence
    after another (tt-transformers' generator prefills each user on its own before decoding the batch), so the
    first user's first token comes after one sequence's prefill."""

    batched = "batched"
    sequential = "sequential"


class MathFidelity(StrEnum):
    """Mantissa passes a matrix engine makes per multiply (Tenstorrent's names): LoFi one pass, HiFi4 four.
    More passes are more exact and proportionally slower (tt-isa-documentation MatrixUnit.md)."""

    LoFi = "LoFi"
    HiFi2 = "HiFi2"
    HiFi3 = "HiFi3"
    HiFi4 = "HiFi4"

    @property
    def phases(self) -> int:
        return int(self.value[-1]) if self.value[-1].isdigit() else 1


#: Fidelity an op runs at when the mapping does not say, by its weights' format: the precision S1's
#: SrcASrcB table calls "reasonable" for that format (bf16 2 passes; fp16/tf32/fp32 4; fp8 and bfp4 1 at any
#: precision), with bfp8 at its full-precision 2 passes, as tt-transformers' accuracy configs run it.
DEFAULT_FIDELITY: dict[DType, MathFidelity] = {
    DType.fp32: MathFidelity.HiFi4,
    DType.tf32: MathFidelity.HiFi4,
    DType.fp16: MathFidelity.HiFi4,
    DType.bf16: MathFidelity.HiFi2,
    DType.bfp8: MathFidelity.HiFi2,
    DType.bfp4: MathFidelity.LoFi,
    DType.fp8: MathFidelity.LoFi,
    DType.int8: MathFidelity.LoFi,
}


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
