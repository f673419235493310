"""A failed Spark job leaves no task writing after its error: runtime/spark/settle.py."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_trident.runtime.spark.settle import settled_job


def _racing_tasks(root: str) -> Any:
    """Task 0 fails once task 1 has started; task 1 writes its marker 1 s later (before
    Spark's 2 s kill of its Python worker), the way a commit task about to finish does."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column(0).to_pylist():
                started, written = Path(root, "started"), Path(root, "written")
                if task == 0:
                    deadline = time.monotonic() + 60
                    while not started.exists() and time.monotonic() < deadline:
                        time.sleep(0.02)
                    raise RuntimeError("task 0 fails")
                started.touch()
                time.sleep(1.0)
                written.touch()
            yield batch

    return run


def test_a_failed_job_has_no_task_running_when_its_error_comes_out(
    spark: Any, tmp_path: Path
) -> None:
    frame = spark.range(0, 2, 1, 2).mapInArrow(_racing_tasks(str(tmp_path)), "id long")
    with pytest.raises(Exception, match="task 0 fails"), settled_job(spark, "settle test"):
        frame.collect()
    assert (tmp_path / "started").exists()
    seen = (tmp_path / "written").exists()
    time.sleep(3.0)  # the 1 s of task 1 and more: a task still running would write by now
    assert (tmp_path / "written").exists() == seen


def test_the_job_group_is_the_callers_again_after_the_job(spark: Any) -> None:
    sc = spark.sparkContext
    sc.setJobGroup("mine", "my jobs")
    try:
        with settled_job(spark, "trident wc: commit txid 3"):
            assert sc.getLocalProperty("spark.job.description") == "trident wc: commit txid 3"
            spark.range(3).collect()
        assert sc.getLocalProperty("spark.jobGroup.id") == "mine"
        assert sc.getLocalProperty("spark.job.description") == "my jobs"
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
        sc.setLocalProperty("spark.job.interruptOnCancel", None)
