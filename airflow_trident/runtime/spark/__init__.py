"""The Spark runtime: a batch's processing phase as Spark DataFrames.

:class:`SparkBatchProcessor` takes the same emitted rows as the local runtime's
``LocalBatchProcessor.process`` and a SparkSession (classic or Spark Connect: only DataFrame
APIs Connect supports are used, no RDDs, no SparkContext), and returns, per state, the rows the
local runtime would stage — as lazy DataFrames (:class:`SparkProcessResult`).

How operations run
------------------
* Built-ins run as Spark SQL, with no Python per row: ``Split`` (``split`` + ``explode``, with
  ``str.split()``'s whitespace and no empty tokens), ``Count``/``Sum``/``Min``/``Max``
  (``groupBy().agg()``: Spark's partial aggregation plays Trident's combiner), ``project``,
  merges (``unionAll``), joins (null-safe equi-joins), repartitions.
* User operations (functions, filters, maps, peeks, aggregators, state queries) run in Spark's
  Python workers through ``mapInArrow``, consecutive ones fused, with the local runtime's code
  (so the same rows and the same errors, naming step, txid and record).
* Fields no later step reads are not shipped (they show as ``<pruned>`` in error records).
* Where a ``partition_aggregate`` runs, Spark partitions are the batch's partitions (one per
  source partition, or the parallelism hint's count); elsewhere Spark picks partition counts.

Output types of Python steps
----------------------------
``mapInArrow`` needs its output schema up front. An operation declares its types with an
optional attribute, and then the driver runs none of its code::

    class Score(Function):
        output_types = {"score": pyarrow.float64()}  # field name -> pyarrow.DataType
        # or {"score": object}: any Python value, pickled

(for aggregators, keyed by their output field). For steps that leave a kept computed field
undeclared (the fallback), the driver runs them, and the steps before them in the stage,
through the local runtime on a sample (the first ``sample_rows`` tuples of each source
partition) and infers each new field's Arrow type from the values: ints -> ``int64``, floats ->
``double``, dicts -> maps, lists and tuples -> lists (they come back as lists), all ``None`` ->
``string``; values Arrow cannot type (sets, objects, mixed kinds) travel pickled. Steps that
compute no field (filters, ``peek``) are sampled only to feed a later undeclared step. A value
that does not fit the type (a float in an integer field included) fails the batch with a
``BatchFailedError`` naming the step and suggesting ``output_types``. The sample runs user code
on the driver, on a copy of the operations (a pickle round trip, as Spark ships them): what it
does to them (a count kept on ``self``) never reaches the workers; its effects outside them (a
file written) happen on the driver as well.

Workers need the user's modules (and this package) importable, as any PySpark UDF; in-memory
states are per process, so ``state_query`` in a worker should read a SQL state.

Examples
--------
>>> from airflow_trident.runtime.spark import SparkBatchProcessor, SparkProcessResult
>>> SparkBatchProcessor.process.__doc__.splitlines()[0]
"Build batch ``txid``'s DataFrames; ``sources`` maps source step ids to partitions of"
"""

from __future__ import annotations

from airflow_trident.runtime.spark.processor import SparkBatchProcessor
from airflow_trident.runtime.spark.result import SparkProcessResult, SparkStagedState
from airflow_trident.runtime.spark.session import local_session, spark_session

__all__ = [
    "SparkBatchProcessor",
    "SparkProcessResult",
    "SparkStagedState",
    "local_session",
    "spark_session",
]
