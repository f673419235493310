"""Test your own topologies under faults, in-process (``docs/testing.md``).

* :mod:`~airflow_trident.testing.faults` — :class:`~airflow_trident.testing.faults.FailOnce`
  (a Function failing the first attempt of a batch, across processes) and
  :func:`~airflow_trident.testing.faults.expire_session` (expire a ZooKeeper session);
* :mod:`~airflow_trident.testing.fault_points` — named fault points:
  :class:`~airflow_trident.testing.fault_points.FaultInjector` and the wrappers that hit them,
  ``FaultyStore`` (coordinator store), ``FaultyStateFactory`` (states), ``faulty_spout``
  (partitioned spouts), ``FailWhenArmed`` (a Function step), ``kill_this_process``;
* :mod:`~airflow_trident.testing.forked` — ``run_forked``: a step in a child process that a
  fault may ``SIGKILL`` half-way;
* :mod:`~airflow_trident.testing.schedule` — ``run_schedule``: seeded randomized fault
  schedules over the batch lifecycle, checked against a reference after every commit; server
  restart faults take the caller's server handles (``RestartableServer``);
* :mod:`~airflow_trident.testing.fault_topology` — the schedules' topology, data and reference.

Memory spouts are in :mod:`airflow_trident.spout.memory`. Nothing here imports ``airflow`` or
``pyspark``, nor :mod:`airflow_trident.examples`; the project's own test harness (Airflow,
scheduler, servers, Spark Connect, and the source-chaos schedules that break a database table
or a file log: ``tests/harness/source_chaos_schedule.py``) is ``tests/harness`` in the source
tree and is not shipped.
"""
