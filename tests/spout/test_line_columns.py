"""``LineParser.parse_column`` (Arrow's JSON reader, the Spark runtime's fast path) gives what
``LineParser.parse`` (Python, line by line) gives, or declines: never another value, never a
record the line parser refuses or skips."""

from __future__ import annotations

import json
import math
import random
import string
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.errors import MalformedRecordError
from airflow_trident.spout.file_records import LineParser

SCHEMAS: dict[str, tuple[tuple[str, str], ...]] = {
    "string": (("s", "string"),),
    "bigint": (("n", "bigint"),),
    "int": (("n", "int"),),
    "double": (("d", "double"),),
    "boolean": (("b", "boolean"),),
    "all": (("s", "string"), ("n", "bigint"), ("i", "int"), ("d", "double"), ("b", "boolean")),
}

EDGES = [
    '{"s": "x"}', '{"s": 123}', '{"s": true}', '{"s": [1]}', '{"s": {"a": 1}}', '{"s": null}',
    "{}", '{"s": "a", "s": "b"}', '{"s": "a"} {"s": "b"}', '{"s": "a"}{"s": "b"}', '{"S": "a"}',
    '{"n": 1.0}', '{"n": 1e2}', '{"n": true}', '{"n": "5"}', '{"n": 9223372036854775808}',
    '{"n": 9223372036854775807}', '{"n": -9223372036854775808}', '{"n": -9223372036854775809}',
    '{"n": 2147483648}', '{"n": 2147483647}', '{"n": -2147483648}', '{"n": -2147483649}',
    '{"n": -0}', '{"n": 01}', '{"n": +1}', '{"d": 1}', '{"d": NaN}', '{"d": -NaN}', '{"d": Inf}',
    '{"d": -Inf}', '{"d": Infinity}', '{"d": -Infinity}', '{"d": nan}', '{"d": "1.5"}',
    '{"d": true}', '{"d": 0.1}', '{"d": 1e400}', '{"d": -1e400}', '{"d": 1e-400}', '{"d": -0.0}',
    '{"d": 123456789012345678901234567890}', '{"d": 9007199254740993}', '{"d": .5}', '{"d": 5.}',
    '{"d": 2.2250738585072011e-308}', '{"d": 4.9e-324}', '{"d": 1.7976931348623157e308}',
    '{"b": 1}', '{"b": "true"}', '{"b": false}', '{"b": null}', '{"s": "\\ud800"}',
    '{"s": "\\ud83d\\ude00"}', '{"s": "a\\u0000b"}', '{"s": "x", "e": [1, {"y": NaN}]}',
    '{"s": "x", "e": Inf}', '{"s": "x", "e": 01}', '{"s": "x",}', '{"s": "a", "s": 5}',
    '{"\\u0073": "x"}', '{"s": "x", "e": 1, "e": 2}', '{"s": "x\ty"}', '{"s": "x\x7fy"}',
    ' {"s": "x"}', '{"s": "x"} ', '\ufeff{"s": "x"}', '\x1c{"s": "x"}', '{"s": "x"}\x1f',
    "", "   ", "\xa0", "[1, 2]", '[{"s": "x"}]', "5", '"s"', "null", "{", "}", "{}}", "{{}",
    '{"s": "x"} // c', '{"s": \'x\'}', '{s: "x"}', '{"s": "\\x"}', '{"s": "\\/\\b\\f\\n\\r\\t"}',
    '{"s": "é ü 中 😀"}', '{"s": "' + "y" * 5000 + '"}',
    '{"s": "x", "e": ' + "[" * 600 + "]" * 600 + "}",
    '{"s": "x", "e": ' + "[" * 1200 + "]" * 1200 + "}",
    '{"s": "x", "n": 1, "i": 2, "d": 3.5, "b": true}', '{"s": "x", "n": 1, "i": 2.0}',
]  # fmt: skip


def parse_lines(parser: LineParser, lines: list[str]) -> list[Any] | None:
    """What the line parser gives for ``lines``: each a tuple; ``None`` when it refuses or
    skips one (then the fast path must decline the whole batch)."""
    rows = []
    for line in lines:
        try:
            row = parser.parse(line, False, "f.jsonl")
        except (MalformedRecordError, RecursionError):
            return None
        if row is None:
            return None
        rows.append(row)
    return rows


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, float) and isinstance(b, float) and repr(a) == repr(b)
    return type(a) is type(b) and a == b


def check(schema: tuple[tuple[str, str], ...], lines: list[str]) -> bool:
    """Assert the fast path agrees with the line parser on ``lines``; whether it took them."""
    parser = LineParser("json", schema, rescue=False, drop=False, where="w")
    try:
        column = pa.array(lines, pa.string())
    except (UnicodeEncodeError, pa.ArrowException):
        return False
    batch = parser.parse_column(column)
    if batch is None:
        return False
    expected = parse_lines(parser, lines)
    assert expected is not None, f"the fast path took lines the line parser refuses: {lines!r}"
    got = list(zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True))
    assert batch.num_rows == len(expected)
    for line, want, row in zip(lines, expected, got, strict=True):
        assert all(same(w, r) for w, r in zip(want, row, strict=True)), (line, want, row)
    return True


def _clean_lines() -> list[str]:
    """1,000 well-typed lines of the ``all`` schema."""
    return [json.dumps({"s": f"w{i}", "n": i, "i": -i, "d": i / 7, "b": i % 2 == 0})
            for i in range(1000)]  # fmt: skip


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_every_edge_line_alone(name: str) -> None:
    taken = [line for line in EDGES if check(SCHEMAS[name], [line])]
    assert taken, "the fast path took no line at all"


def test_a_clean_batch_is_taken_and_one_bad_line_declines_it() -> None:
    schema = SCHEMAS["all"]
    good = _clean_lines()
    assert check(schema, good)
    for bad in ('{"s": 1}', '{"n": 1.5}', '{"d": Inf}', '{"d": -NaN}', '{"s": "x", "e": Inf}',
                "", '{"s": "a"}{"s": "b"}', "[1]"):  # fmt: skip
        lines = [*good[:500], bad, *good[500:]]
        parser = LineParser("json", schema, rescue=False, drop=False, where="w")
        assert parser.parse_column(pa.array(lines, pa.string())) is None, bad


def test_words_inf_and_nan_in_text_or_as_python_reads_them_keep_the_batch_whole() -> None:
    # (before: any "Inf" or "NaN" in a batch declined it whole, so a batch of English text,
    # "Information", was parsed line by line)
    schema = SCHEMAS["all"]
    good = _clean_lines()
    words = ['{"s": "Information: NaN", "d": NaN}', '{"s": "Inf", "e": Infinity}',
             '{"d": -Infinity, "s": "NaNa"}', '{"s": "INFO", "x": "Inf\\u0000"}']  # fmt: skip
    lines = [*good[:300], *words, *good[300:]]
    assert check(schema, lines)  # taken, each value the line parser's (NaN as NaN)
    parser = LineParser("json", schema, rescue=False, drop=False, where="w")
    batch = parser.parse_column(pa.array(lines, pa.string()))
    assert math.isnan(batch.column(3)[300].as_py())
    assert batch.column(3)[302].as_py() == -math.inf


def test_invalid_utf8_declines() -> None:
    raw = [b'{"s": "x"}', b'{"s": "\xff"}', b'{"s": "x", "e": "\xed\xa0\x80"}']
    column = pa.array(raw, pa.binary()).view(pa.string())  # bytes as Spark's text reader hands them
    parser = LineParser("json", SCHEMAS["string"], rescue=False, drop=False, where="w")
    assert parser.parse_column(column) is None


def test_rescue_csv_and_untyped_fields_are_left_to_the_line_parser() -> None:
    lines = pa.array(['{"s": "x"}'], pa.string())
    assert LineParser("json", (("s", "string"),), True, False, "w").parse_column(lines) is None
    assert LineParser("csv", (("s", "string"),), False, False, "w").parse_column(lines) is None
    assert LineParser("json", (("s", "null"),), False, False, "w").parse_column(lines) is None


def _number(rng: random.Random) -> str:
    sign = rng.choice(["", "", "-"])
    whole = rng.choice(["0", str(rng.randrange(1, 10)) + "".join(
        rng.choices(string.digits, k=rng.randrange(0, 25)))])  # fmt: skip
    frac = rng.choice(["", "", "." + "".join(rng.choices(string.digits, k=rng.randrange(1, 20)))])
    exp = rng.choice(["", "", "", f"e{rng.randrange(-330, 330)}", f"E+{rng.randrange(0, 30)}"])
    return sign + whole + frac + exp


def _value(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return "null"
    if kind == 1:
        return rng.choice(["true", "false"])
    if kind in (2, 3):
        return _number(rng)
    if kind == 4:
        return repr(rng.uniform(-1e6, 1e6)) if rng.random() < 0.5 else repr(rng.random() * 1e-300)
    if kind == 5:
        chars = string.ascii_letters + ' \\"é中😀/' + "\x7f"
        text = "".join(rng.choices(chars, k=rng.randrange(0, 12)))
        return json.dumps(text, ensure_ascii=rng.random() < 0.5)
    if kind in (6, 7):
        return "[" + ", ".join(_value(rng, depth + 1) for _ in range(rng.randrange(0, 3))) + "]"
    return _object(rng, depth + 1)


def _object(rng: random.Random, depth: int = 0) -> str:
    keys = rng.choices(["s", "n", "i", "d", "b", "x", "S"], k=rng.randrange(0, 6))
    return "{" + ", ".join(f'"{k}": {_value(rng, depth)}' for k in keys) + "}"


def test_random_records_agree_with_the_line_parser() -> None:
    rng = random.Random(23)
    taken = {name: 0 for name in SCHEMAS}
    for _ in range(1500):
        line = _object(rng)
        for name, schema in SCHEMAS.items():
            taken[name] += check(schema, [line])
    assert all(count > 25 for count in taken.values()), taken
    # well-typed numbers of every shape: the same double as Python's float(), correctly rounded
    doubles = [f'{{"d": {_number(rng)}}}' for _ in range(5000)]
    doubles = [d for d in doubles if not math.isinf(float(json.loads(d)["d"]))]
    assert not check(SCHEMAS["double"], ['{"d": 1.5}', '{"d": -0}'])  # an integer -0: declined
    taken_alone = [d for d in doubles if check(SCHEMAS["double"], [d])]  # 0e320: Arrow declines
    assert len(taken_alone) > 0.9 * len(doubles)  # the rest: integer -0 and 0e320
    assert check(SCHEMAS["double"], taken_alone)
