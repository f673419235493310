"""Installs :mod:`module_path`'s tracer in every Python process that has ``TRIDENT_TRACE_TASK``
set (the task processes of ``airflow dags test``); see ``scripts/module_path.py``."""

import os
import sys

if os.environ.get("TRIDENT_TRACE_TASK"):
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import module_path

    module_path.install()
