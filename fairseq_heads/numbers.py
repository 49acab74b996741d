"""Missing values: NaN and None in tables, JSON and text (the one place that decides how)."""
import math
from typing import Optional


def as_float(value) -> float:
    """float(value); None -> NaN."""
    return float(value) if value is not None else float("nan")


def is_missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def json_safe(value):
    """NaN -> None, recursively through dicts, lists and tuples (JSON has no NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def json_float(value) -> Optional[float]:
    """A number for JSON: float, or None for None / NaN."""
    return None if is_missing(value) else float(value)


def format_number(value, digits: int = 2, missing: str = "-") -> str:
    """`value` with `digits` decimals; `missing` for None / NaN; other values as str()."""
    if is_missing(value):
        return missing
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)
