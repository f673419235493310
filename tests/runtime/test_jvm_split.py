"""The package's Java ``str.split()`` (jvm/functions/; runtime/spark/jvm_functions.py) against
Python's own: every code point, generated text, the regex it replaces, a classic session
and a Spark Connect one, and the sessions that cannot load it."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F

from airflow_trident.runtime.spark import compile as C
from airflow_trident.runtime.spark import jvm_functions
from airflow_trident.runtime.spark.jvm_functions import JAR, SPLIT, split_function
from tests.harness import with_project_path

SPACES = [chr(c) for c in range(0x110000) if chr(c).isspace()]


def words_of(
    spark: Any, texts: list[str | None], *, regex: bool = False, partitions: int = 0
) -> list[list[str]]:
    """Each text's words by :func:`C.split_words` (:func:`C.regex_split_words` when ``regex``),
    in order; the texts spread over ``partitions`` first when it is not 0 (the executors').
    Child processes (Connect, ``spark-submit``) import it too."""
    frame = spark.createDataFrame(pd.DataFrame({"i": range(len(texts)), "s": texts}))
    if partitions:
        frame = frame.repartition(partitions)
    split = C.regex_split_words if regex else C.split_words
    words = split(frame, "s", "w", ["i"])
    got: list[list[str]] = [[] for _ in texts]
    # explode keeps each array's order within a row; posexplode is not needed for one row's
    # words as long as they are collected from one partition in order
    for row in words.coalesce(1).collect():
        got[row["i"]].append(row["w"])
    return got


@pytest.fixture
def fresh_session(spark: Any) -> Any:
    """A new session of the shared context: nothing registered in it yet."""
    return spark.newSession()


def test_a_classic_session_splits_with_the_java_function(spark: Any) -> None:
    # Given the shared local session
    # When a topology's split is compiled there
    frame = spark.createDataFrame([("a b",)], "s string")
    plan = C.split_words(frame, "s", "w", [])._jdf.queryExecution().optimizedPlan().toString()
    # Then the plan calls the package's function, not Spark's split
    assert split_function(spark) == SPLIT
    assert f"explode({SPLIT}(" in plan
    assert "explode(split(" not in plan


def test_every_code_point_splits_as_in_python(spark: Any) -> None:
    # Given "a<c>b" for every code point but the surrogates (not text on either side)
    codes = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    frame = spark.createDataFrame(
        pd.DataFrame({"c": codes, "s": [f"a{chr(c)}b" for c in codes]})
    ).repartition(4)
    # When the Java function splits each
    words = frame.select("c", "s", F.call_udf(split_function(spark) or "", F.col("s")).alias("w"))
    two = words.where("size(w) = 2 and w[0] = 'a' and w[1] = 'b'")
    one = words.where("size(w) = 1 and w[0] = s")
    # Then it split at exactly Python's whitespace, and nowhere else
    assert sorted(r["c"] for r in two.select("c").collect()) == [ord(c) for c in SPACES]
    assert one.count() + len(SPACES) == len(codes)


def test_null_empty_and_only_whitespace(spark: Any) -> None:
    texts: list[str | None] = [None, "", " ", "\x1c\x1d\x1e\x1f", "\u3000x\u3000", "x"]
    assert words_of(spark, texts) == [[] if t is None else t.split() for t in texts]


_text = st.text(
    alphabet=st.one_of(
        st.sampled_from(SPACES),
        st.sampled_from("ab\u200b\ufeff\U0001f600\u0301é"),  # zero-width, BOM, astral, combining
        st.characters(exclude_categories=["Cs"]),
    ),
    max_size=40,
)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(texts=st.lists(st.one_of(st.none(), _text), min_size=1, max_size=30))
def test_generated_text_splits_as_in_python_and_as_the_regex(
    spark: Any, texts: list[str | None]
) -> None:
    expected = [[] if t is None else t.split() for t in texts]
    assert words_of(spark, texts) == expected
    assert words_of(spark, texts, regex=True) == expected


def test_a_package_without_the_jar_splits_by_regex(
    fresh_session: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    tmp_path: Any,
) -> None:
    # Given a package without the jar (an install that lost its package data)
    monkeypatch.setattr(jvm_functions, "JAR", tmp_path / "absent.jar")
    caplog.set_level(logging.INFO, logger=jvm_functions.__name__)
    texts = ["a\u3000b c", None, "  "]
    # When a session splits words
    got = words_of(fresh_session, texts)
    # Then it said so once, and split by Spark's regex into Python's words
    assert split_function(fresh_session) is None
    assert [r.message for r in caplog.records].count(
        "words split by Spark's regular expression: the package has no absent.jar"
    ) == 1
    assert got == [[] if t is None else t.split() for t in texts]
    plan = C.split_words(fresh_session.createDataFrame([("a",)], "s string"), "s", "w", [])
    assert SPLIT not in plan._jdf.queryExecution().optimizedPlan().toString()


def test_a_session_that_cannot_load_the_function_splits_by_regex(
    fresh_session: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a function the session cannot load (a class the jar does not have)
    monkeypatch.setattr(jvm_functions, "SPLIT_CLASS", "io.github.airflowtrident.spark.Absent")
    caplog.set_level(logging.WARNING, logger=jvm_functions.__name__)
    # When it splits words
    got = words_of(fresh_session, ["x\ty", "z"])
    # Then the warning names the jar and the error, and the words are still Python's
    assert got == [["x", "y"], ["z"]]
    (warning,) = [r.message for r in caplog.records]
    assert warning.startswith("words split by Spark's regular expression: ")
    assert "airflow-trident-functions.jar could not be loaded" in warning


CHILD = """
import json, logging, sys, uuid
from airflow_trident.runtime.spark.jvm_functions import split_function
from airflow_trident.runtime.spark.session import remote_session
from tests.runtime.test_jvm_split import words_of
texts = json.loads(sys.argv[2])
said = []
handler = logging.Handler()
handler.emit = lambda record: said.append(record.getMessage())
logger = logging.getLogger("airflow_trident.runtime.spark.jvm_functions")
logger.addHandler(handler)
logger.setLevel(logging.INFO)
out = []
# two sessions of their own (the second adds the same artifact again), then two attaches to one
# shared session (as a topology's batches with [trident] connect_session_reuse)
share = "jvm-split-" + uuid.uuid4().hex
for key in (None, None, share, share):
    said.clear()
    with remote_session(sys.argv[1], share=key) as spark:
        words = words_of(spark, texts)
        out.append({"function": split_function(spark), "words": words, "said": list(said)})
print(json.dumps(out))
"""


def test_a_connect_session_uploads_the_jar_and_splits_as_in_python(connect_url: str) -> None:
    # Given text with every kind of whitespace, and the shared Connect server (a child process:
    # a Connect session cannot share this process with the classic one)
    texts: list[str | None] = ["".join(SPACES).join("abc"), None, "", "x\u200by z", *SPACES]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_CONNECT")}
    done = subprocess.run(
        [sys.executable, "-c", CHILD, connect_url, json.dumps(texts)],
        env=with_project_path(env), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    # Then every session split with the Java function, as Python does
    expected = [[] if t is None else t.split() for t in texts]
    assert [r["function"] for r in runs] == [SPLIT] * 4
    assert [r["words"] for r in runs] == [expected] * 4
    # and the shared session's second batch found it registered by the first
    loaded = f"words split by {jvm_functions.SPLIT_CLASS} ({SPLIT}, from {JAR})"
    found = (
        f"words split by {jvm_functions.SPLIT_CLASS} ({SPLIT}, registered in this shared session)"
    )
    assert [r["said"] for r in runs] == [[loaded], [loaded], [loaded], [found]]


DRIVER = """
import json, logging, sys
logging.basicConfig(level=logging.INFO)  # as the batch's job (batch/spark_job.py)
from airflow_trident.runtime.spark.jvm_functions import split_function
from airflow_trident.runtime.spark.session import spark_session
from tests.runtime.test_jvm_split import words_of
spark = spark_session("jvm-split-test")
words = words_of(spark, json.loads(sys.argv[1]), partitions=4)  # on the executors
print("RESULT " + json.dumps({"function": split_function(spark), "words": words}), flush=True)
spark.stop()
"""


def submit_split(tmp_path: Any, master: str, texts: list[str | None]) -> tuple[Any, str]:
    """``spark-submit --master master`` of :data:`DRIVER` over ``texts``: (its result, its
    output). The application's ``spark.jars`` is empty, as a batch's process step's."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    submit = os.path.join(os.path.dirname(sys.executable), "spark-submit")
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run(
        [submit, "--master", master, "--conf", "spark.ui.enabled=false",
         "--conf", "spark.default.parallelism=4", str(driver), json.dumps(texts)],
        env=with_project_path(env), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
    # (spark-submit's PythonRunner merges the driver's stderr into its stdout)
    return json.loads(line.removeprefix("RESULT ")), done.stdout


def test_a_spark_submit_driver_adds_the_jar_itself(tmp_path: Any) -> None:
    # Given a spark-submit application with nothing on its spark.jars
    texts: list[str | None] = ["a\u3000b\x1cc", None, " \u2029 ", "x y"]
    result, output = submit_split(tmp_path, "local[1]", texts)
    # Then the driver loaded the function from the installed package and split as Python does
    assert result == {"function": SPLIT, "words": [[] if t is None else t.split() for t in texts]}
    assert f"INFO:{jvm_functions.__name__}:words split by {jvm_functions.SPLIT_CLASS}" in output
