"""Characters of an override that Hydra's grammar does not read as typed, said in one line.

- An invisible character (a zero-width space, a non-breaking space, a byte-order mark: any
  character beyond ASCII that is not printable) is named with its code point and Unicode name
  and where it sits (`invisible_message`): it cannot be seen in the command, and quoting it would
  keep it in the value.
- A visible character beyond ASCII (``é``, ``日本語``) is read by Hydra only inside quotes: the hint
  quotes each value that holds one, each value of a sweep or a list alone (``a="é",b``, not
  ``a="é,b"``, one value), and is given only if Hydra reads it (`quoting_hint`).
"""

from __future__ import annotations

import unicodedata

SEPARATORS = ",[](){}"
"""What separates the values of a sweep, a list, a dict or a sweep function in Hydra's grammar."""


def char_name(ch: str) -> str:
    """``U+200B (ZERO WIDTH SPACE)``."""
    return f"U+{ord(ch):04X} ({unicodedata.name(ch, 'no Unicode name')})"


def invisible_message(arg: str) -> str | None:
    """One line naming the first invisible character beyond ASCII in ``arg`` and where it is; None
    when there is none."""
    at = next((i for i, ch in enumerate(arg) if not ch.isascii() and not ch.isprintable()), None)
    if at is None:
        return None
    where = f"after {arg[:at]!r}" if at else "at its start"
    return (
        f"{arg!r} holds an invisible character, {char_name(arg[at])}, {where}; type the override again "
        "without it"
    )


def _quoted(element: str) -> str:
    """``element`` (one value, with the spaces around it) quoted when it holds a character beyond
    ASCII and is not quoted yet."""
    value = element.strip()
    if not value or value.isascii() or value[0] in "\"'":
        return element
    quote = "'" if '"' in value else '"'
    start = element.index(value)
    return f"{element[:start]}{quote}{value}{quote}{element[start + len(value):]}"


def quote_values(value: str) -> str:
    """``value`` with each of its values that holds a character beyond ASCII quoted alone: ``é,b``
    → ``"é",b``; ``[é,b]`` → ``["é",b]``; ``{k:é}`` → ``{k:"é"}``."""
    out: list[str] = []
    element, depth = "", 0
    for ch in value:
        if ch in SEPARATORS or (ch == ":" and depth > 0):
            out.append(_quoted(element))
            element = ""
            out.append(ch)
            depth += (ch in "[({") - (ch in "])}")
        else:
            element += ch
    out.append(_quoted(element))
    return "".join(out)


def quoting_hint(arg: str) -> str | None:
    """``arg`` with its values beyond ASCII quoted (`quote_values`) when Hydra's parser reads that;
    None when it does not."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    key, sep, value = arg.partition("=")
    if not sep:
        return None
    hint = f"{key}={quote_values(value)}"
    try:
        OverridesParser.create().parse_overrides([hint])
    except Exception:
        return None
    return hint


def non_ascii_message(arg: str) -> str:
    """One line for an override beyond ASCII that Hydra's parser refused."""
    invisible = invisible_message(arg)
    if invisible is not None:
        return invisible
    hint = quoting_hint(arg)
    fix = f"write '{hint}'" if hint is not None else "quote each value that holds one"
    return f"{arg}: Hydra's override syntax takes characters beyond ASCII only inside quotes; {fix}"
