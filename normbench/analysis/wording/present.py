"""Numbers as people read them: signed toward the claim, in the claim's natural unit, 2–3
significant digits, never in e-notation.

The convention, everywhere a difference is shown (the findings page, ``claims.md``, the forests):

- a directional claim ``a > b`` reads ``a − b`` (a ratio: ``a / b``); a claim ``a < b`` reads
  ``b − a`` (``b / a``), so that **+ (a ratio above 1) is always the claim's direction**, and the
  two arms are named in the order subtracted ("standard − BN: +1.2 pts");
- an equivalence claim (and a leaderboard's two-sided ``differs``) reads ``a − b``, with its margin;
- differences in the measure's natural unit (`normbench.analysis.wording.units`): accuracies stored as
  fractions in percentage points, BLEU, nats, decades of lr; ratios as multiples, "0.44×".

`num` writes any number without e-notation: 3 significant digits (trailing zeros dropped, as
``%g``), thousands separators, and below
10⁻⁴ the power of ten in superscript ("4.3 × 10⁻⁶"); `ratio_num` writes a ratio below 0.01 as its
reciprocal ("1/230,000").
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from normbench.analysis.wording.figure_names import ARM_NAMES
from normbench.analysis.wording.units import Unit

MINUS = "−"
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def to_float(v: Any) -> float:
    """A CSV cell as a float (NaN when empty or not a number)."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _round_sig(v: float, digits: int) -> tuple[float, int]:
    """``v`` rounded to ``digits`` significant digits, and the number of decimals that shows them."""
    exponent = math.floor(math.log10(abs(v)))
    decimals = digits - 1 - exponent
    rounded = round(v, decimals)
    if rounded != 0 and math.floor(math.log10(abs(rounded))) > exponent:  # 9.99 → 10.0: one digit fewer
        decimals -= 1
        rounded = round(v, decimals)
    return rounded, max(decimals, 0)


def num(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits and no e-notation: ``0.0121``, ``12.1``, ``234,000``;
    below 10⁻⁴ in magnitude ``4.3 × 10⁻⁶``; NaN ``n/a``; ±inf ``∞``. Minus is U+2212."""
    if math.isnan(v):
        return "n/a"
    if math.isinf(v):
        return ("" if v > 0 else MINUS) + "∞"
    if v == 0:
        return "0"
    if abs(v) < 1e-4:
        exponent = math.floor(math.log10(abs(v)))
        mantissa, decimals = _round_sig(v / 10.0**exponent, min(digits, 2))
        if abs(mantissa) >= 10:
            mantissa, exponent = mantissa / 10, exponent + 1
        text = f"{mantissa:.{max(decimals, 0)}f}".rstrip("0").rstrip(".")
        return f"{text} × 10{str(exponent).translate(SUPERSCRIPT)}".replace("-", MINUS)
    rounded, decimals = _round_sig(v, digits)
    text = f"{rounded:,.{decimals}f}"
    if "." in text:  # as %g: no trailing zeros (1.0 → 1, 0.50 → 0.5)
        text = text.rstrip("0").rstrip(".")
    return text.replace("-", MINUS)


def signed_num(v: float, digits: int = 3) -> str:
    """`num` with its sign: ``+1.2``, ``−0.33``, ``0``."""
    text = num(v, digits)
    return text if v <= 0 or math.isnan(v) else "+" + text


def ratio_num(v: float, digits: int = 3) -> str:
    """A ratio (positive): `num`, but below 0.01 as its reciprocal, ``1/230,000``; 0 as ``0``."""
    if math.isnan(v):
        return "n/a"
    if 0 < v < 0.01:
        return "1/" + num(1 / v, 2)
    return num(v, digits)


def p_text(p: Any) -> str:
    """A p-value (or q): 2 significant digits; below 0.0001 ``<0.0001``; missing ``—``."""
    v = to_float(p)
    if math.isnan(v):
        return "—"
    return "<0.0001" if v < 1e-4 else num(v, 2)


def is_ratio(row: Mapping[str, Any]) -> bool:
    """Whether a ``claims.csv`` row compares a ratio (column ``ratio``; a claim not judged: its test)."""
    ratio = row.get("ratio")
    if ratio in ("", None):
        return row.get("test") == "welch_log"
    return ratio is True or str(ratio) == "True"


def flips(row: Mapping[str, Any]) -> bool:
    """A ``less`` claim reads b − a (b / a): + is the claim's direction."""
    return row.get("relation") == "less"


@dataclass(frozen=True)
class Signed:
    """A claim's difference as read: ``arms`` ("standard − BN", "NLP / CV"), the estimate and its
    interval in natural units (a ratio: the ratio), signed toward the claim."""

    arms: str
    estimate: float
    lo: float
    hi: float
    ratio: bool
    unit: Unit

    def value(self, v: float, lead: bool = False) -> str:
        """One number of this difference: a ratio ``0.44×``, a difference ``+1.2 pts`` (``lead``:
        with its sign and unit) or ``1.2`` (an interval's end)."""
        if self.ratio:
            text = ratio_num(v) + "×"
            return text if lead else text.removesuffix("×")
        return signed_num(v) + self.unit.diff if lead else num(v)

    def text(self, arms: bool = True) -> str:
        """``standard − BN: +1.2 pts [0.33, 2.1]`` (``arms``: with the arms named)."""
        core = f"{self.value(self.estimate, lead=True)} [{self.value(self.lo)}, {self.value(self.hi)}]"
        return f"{self.arms}: {core}" if arms else core


def _orient(v: float, ratio: bool, flip: bool, scale: float) -> float:
    if ratio:
        return (math.inf if v == 0 else 1 / v) if flip else v
    return -v * scale if flip else v * scale


NORM_NAMES = ARM_NAMES
"""A norm's registry name as the papers write it (arm labels of the leaderboard's rules are registry names):
the figures' table, so an arm has one name on every page."""
SNAKE = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?![\w/])")


def readable(text: str) -> str:
    """``text`` with every snake_case name as a reader says it: a norm's (`NORM_NAMES`), else in words."""
    return SNAKE.sub(lambda m: NORM_NAMES.get(m[0], m[0].replace("_", " ")), text)


def arm_name(label: str) -> str:
    """An arm's label as people read it: a bare registry name (``ln_sample``) as the papers name it."""
    return NORM_NAMES.get(label, readable(label))


def preset_words(preset: str) -> str:
    """A preset as words: ``bn_saturation_cpu`` → ``bn saturation, CPU``."""
    base = preset.removesuffix("_cpu")
    return base.replace("_", " ") + (", CPU" if base != preset else "")


def arm_order(row: Mapping[str, Any]) -> tuple[str, str]:
    """The arms' labels in the order they are read (a ``less`` claim: b first), as people read them."""
    a, b = arm_name(str(row.get("a") or "a")), arm_name(str(row.get("b") or "b"))
    return (b, a) if flips(row) else (a, b)


def signed(row: Mapping[str, Any], unit: Unit) -> Signed | None:
    """The row's difference signed toward its claim (`flips`), in natural units; None without an
    estimate."""
    ratio, flip = is_ratio(row), flips(row)
    est, lo, hi = (to_float(row.get(k)) for k in ("estimate", "lo", "hi"))
    if math.isnan(est):
        return None
    first, second = arm_order(row)
    values = [_orient(v, ratio, flip, unit.scale) for v in (est, lo, hi)]
    if flip:
        values[1], values[2] = values[2], values[1]
    return Signed(f"{first} {'/' if ratio else MINUS} {second}", *values, ratio, unit)


def effect_text(value: float, row: Mapping[str, Any], unit: Unit) -> str:
    """The effect of interest as read: ``+2 pts``, ``2×``; an equivalence margin ``±1 BLEU``; ``—``."""
    if math.isnan(value) or value == 0:
        return "—"
    if row.get("relation") in ("equivalent", "differs"):
        m = abs(value)
        if is_ratio(row):
            return f"{ratio_num(max(m, 1 / m))}×"
        return f"±{num(m * unit.scale)}{unit.diff}"
    if is_ratio(row):  # the effect of interest lies in the claim's direction, however the rules signed it
        return f"{ratio_num(max(value, 1 / value))}×" if value > 0 else "—"
    return f"+{num(abs(value) * unit.scale)}{unit.diff}"


def detectable_text(value: Any, row: Mapping[str, Any], unit: Unit) -> str:
    """A detectable difference (a magnitude; a ratio: a factor ≥ 1) in natural units; ``—``."""
    v = to_float(value)
    if math.isnan(v):
        return "—"
    return f"{ratio_num(v)}×" if is_ratio(row) else f"{num(abs(v) * unit.scale)}{unit.diff}"


def level_text(value: Any, unit: Unit, digits: int = 3) -> str:
    """One arm's value in natural units: ``45.4 %``, ``13.9 BLEU``, ``0.0123``; a log10 lr as the
    rate, ``lr 0.1``."""
    v = to_float(value)
    if math.isnan(v):
        return "—"
    if unit.diff == " decades":
        return f"lr {num(10**v, digits)}"
    return f"{num(v * unit.scale, digits)}{unit.level}"


def arms_text(row: Mapping[str, Any], unit: Unit, named: bool = True) -> str:
    """Both arms' centres, in the order the difference reads: ``standard 66.9 % vs BN 65.7 %``
    (``named=False``: ``66.9 % vs 65.7 %``)."""
    sides = ("b", "a") if flips(row) else ("a", "b")
    if all(math.isnan(to_float(row.get(f"{s}_centre"))) for s in sides):
        return "—"
    if named:
        return " vs ".join(
            f"{arm_name(str(row.get(s) or s))} {level_text(row.get(f'{s}_centre'), unit)}" for s in sides
        )
    bare = Unit(unit.title, unit.scale, "", unit.diff, unit.axis)  # the unit once, at the end: "6.09 vs 4.78 BLEU"
    return " vs ".join(level_text(row.get(f"{s}_centre"), bare) for s in sides) + unit.level
