"""Example topologies, referenced by module path from the DAGs in ``dags/``:
:mod:`~airflow_trident.examples.topologies` (the seeds' word count, global count, opaque count,
user scores), :mod:`~airflow_trident.examples.file_log` (word count over JSON-lines files) and
:mod:`~airflow_trident.examples.kafka` (word count over a Kafka topic).

They use the library only: nothing here imports :mod:`airflow_trident.testing`, ``airflow`` or
``pyspark``.
"""
