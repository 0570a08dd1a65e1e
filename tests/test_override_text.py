"""Overrides beyond ASCII (`normbench.cli.override_text`), issue 59: the quoting hint quotes each
value of a sweep or a list alone (it quoted the whole list, making it one value), and an invisible
character (a zero-width space) is named with its code point (it was "quote it", which keeps it)."""

from __future__ import annotations

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from normbench.cli.override_text import invisible_message, quoting_hint
from tests.conftest import run_cli_inprocess
from tests.faults import fault


def values(override: str) -> list[object]:
    """What Hydra's jobs read from ``override``: each job's value, as the basic sweeper writes the
    job's override (`sweep_string_iterator`) and the job parses it."""
    parser = OverridesParser.create()
    (o,) = parser.parse_overrides([override])
    if not o.is_sweep_override():
        return [o.value()]
    return [parser.parse_overrides([f"{o.key_or_group}={v}"])[0].value() for v in o.sweep_string_iterator()]


@pytest.mark.parametrize(
    ("arg", "meant"),
    [
        ("logger.name=é,b", ["é", "b"]),  # a sweep of two values, not one value "é,b"
        ("logger.tags=[é, b]", [["é", "b"]]),
        ("logger.name=日本語", ["日本語"]),
        ("dataset.root=/data/ü", ["/data/ü"]),
    ],
)
def test_the_hint_is_read_by_hydra_as_the_values_typed(arg: str, meant: list[object]) -> None:
    hint = quoting_hint(arg)
    assert hint is not None and values(hint) == meant, hint


def test_a_sweep_function_and_a_dict_quote_their_values_alone() -> None:
    assert quoting_hint("logger.name=choice(é,b)") == 'logger.name=choice("é",b)'
    assert quoting_hint("logger.tags={a: é}") == 'logger.tags={a: "é"}'
    assert values('logger.tags={a: "é"}') == [{"a": "é"}]


@pytest.mark.parametrize(
    ("arg", "char", "where"),
    [
        ("norm=bn\u200b", "U+200B (ZERO WIDTH SPACE)", "after 'norm=bn'"),
        ("lr=0.1,0.2\u200b", "U+200B (ZERO WIDTH SPACE)", "after 'lr=0.1,0.2'"),
        ("\ufeffseed=1", "U+FEFF (ZERO WIDTH NO-BREAK SPACE)", "at its start"),
        ("logger.name=a\u00a0b", "U+00A0 (NO-BREAK SPACE)", "after 'logger.name=a'"),
    ],
)
def test_an_invisible_character_is_named(arg: str, char: str, where: str) -> None:
    message = invisible_message(arg)
    assert message is not None and f"invisible character, {char}, {where}" in message
    assert ascii(arg) in message  # the override shown with the character escaped: it can be seen
    assert invisible_message("logger.name=é") is None


CASES = [
    (["-m", "logger.run_name=é,b"], "write 'logger.run_name=\"é\",b'"),
    (["-m", "norm=bn,gn\u200b"], "'norm=bn,gn\\u200b' holds an invisible character, U+200B (ZERO WIDTH SPACE), after"),
    (["norm=bn\u200b"], "'norm=bn\\u200b' holds an invisible character, U+200B (ZERO WIDTH SPACE), after 'norm=bn'"),
    (["-m", "norm=bn,gé"], "norm=gé is not an option of norm; valid choices: "),
]


@fault("an override beyond ASCII in a sweep, or with an invisible character (a zero-width space; issue 59)",
       "one line: each value quoted alone in the hint, the invisible character named; exit 2, nothing made",
       "one-line")  # fmt: skip
@pytest.mark.parametrize(("args", "expected"), CASES, ids=[ascii(" ".join(a)) for a, _ in CASES])
def test_the_command_says_it_in_one_line(tmp_path, monkeypatch, capsys, args, expected) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli_inprocess(monkeypatch, capsys, "experiment=quickstart", *args)
    assert code == 2 and err.count("\n") == 1, err
    assert expected in err, err
    assert list(tmp_path.iterdir()) == []
