"""A pytest plugin that follows one batch task through the modules of ``airflow_trident``: the
modules its code enters, in order, from the task's ``execute`` (or its resume after a deferral)
until it returns — and up to its first state write (the first call into
``airflow_trident.state``). ``dag.test()`` runs a task in the test's process, so a profile hook
sees every call.

    TRIDENT_TRACE_TASK=CommitBatchOperator TRIDENT_TRACE_OUT=/tmp/path.jsonl \\
        PYTHONPATH=.:scripts/trace python -m pytest -p module_path tests/e2e/test_dag_runs.py -k ...

``scripts/trace/sitecustomize.py`` installs it in every Python process the test starts (the
task processes of ``airflow dags test``); each traced try appends a JSON line to
``TRIDENT_TRACE_OUT``.

Written for issue 54's done-when (a txid followed from a layout's commit task to the state
write, and the express task from start to commit, crosses fewer modules, with no
back-and-forth). It prints, per traced try: the distinct modules (and those of the path to the
state write), the moves between modules, and the returns to a module left earlier.
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

_ENTRIES = {"execute", "execute_complete", "commit_complete"}
_STATE_WRITES = {"multi_put", "multi_update", "multi_combine", "begin_commit", "append"}
"""The first call into ``airflow_trident.state`` by one of these names is the state write."""


class _Tracer:
    def __init__(self, task_class: str) -> None:
        self.task_class = task_class
        self.frame: FrameType | None = None
        self.path: list[str] = []
        self.tries: list[list[str]] = []
        self.stacks: dict[str, list[str]] = {}

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            if self.frame is None:
                me = frame.f_locals.get("self")
                if frame.f_code.co_name in _ENTRIES and type(me).__name__ == self.task_class:
                    self.frame, self.path, self.stacks = frame, [], {}
                else:
                    return
            module = str(frame.f_globals.get("__name__", ""))
            name = frame.f_code.co_name
            if module.startswith("airflow_trident.state") and name in _STATE_WRITES:
                self.stacks.setdefault("state_write", self._stack(frame))
            if module == "airflow_trident.coordination.commits" and name == "commit":
                self.stacks.setdefault("committed_txid_cas", self._stack(frame))
            if module.startswith("airflow_trident") and (not self.path or self.path[-1] != module):
                self.path.append(module)
        elif event == "return" and frame is self.frame:
            self.tries.append(self.path)
            self.frame = None
            out = os.environ.get("TRIDENT_TRACE_OUT")
            if out:  # now: a task process may end with os._exit (no atexit)
                summary = {**_summary(self.path), "stacks": _stacks(self.stacks)}
                with open(out, "a") as lines:
                    lines.write(json.dumps(summary) + "\n")

    def _stack(self, frame: FrameType) -> list[str]:
        """The modules of ``airflow_trident`` on the call stack from the task's entry down to
        ``frame`` (outermost first, repeats of one module in a row folded)."""
        modules: list[str] = []
        current: FrameType | None = frame
        while current is not None:
            module = str(current.f_globals.get("__name__", ""))
            if module.startswith("airflow_trident") and (not modules or modules[-1] != module):
                modules.append(module)
            if current is self.frame:
                break
            current = current.f_back
        return modules[::-1]


def _stacks(stacks: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Per stack: its modules, how many, and how many come back after another one between."""
    found = {}
    for what, modules in stacks.items():
        seen: set[str] = set()
        back = 0
        for module in modules:
            back += module in seen
            seen.add(module)
        found[what] = {"modules": len(seen), "back_and_forth": back, "chain": modules}
    return found


def _summary(path: list[str]) -> dict[str, Any]:
    left: set[str] = set()
    returns = 0
    for before, after in itertools.pairwise(path):
        left.add(before)
        if after in left:
            returns += 1
    state = next((i for i, m in enumerate(path) if m.startswith("airflow_trident.state")), None)
    to_state = path if state is None else path[: state + 1]
    return {
        "modules": len(set(path)),
        "moves": max(0, len(path) - 1),
        "returns": returns,
        "modules_to_state_write": len(set(to_state)) if state is not None else None,
        "path": path,
    }


_tracer: _Tracer | None = None


def install() -> None:
    """Follow ``TRIDENT_TRACE_TASK`` in this process (and the processes it forks)."""
    global _tracer
    task = os.environ.get("TRIDENT_TRACE_TASK")
    if not task or _tracer is not None:
        return
    _tracer = _Tracer(task)
    sys.setprofile(_tracer)
    threading.setprofile(_tracer)


def pytest_configure(config: Any) -> None:
    install()


def pytest_unconfigure(config: Any) -> None:
    if _tracer is None:
        return
    sys.setprofile(None)
    out = os.environ.get("TRIDENT_TRACE_OUT")
    lines = Path(out).read_text().splitlines() if out and Path(out).exists() else []
    summaries = [json.loads(line) for line in lines]
    for i, s in enumerate(summaries, 1):
        print(
            f"\n[module_path] {_tracer.task_class} try {i}: {s['modules']} modules, "
            f"{s['moves']} moves, {s['returns']} returns to a module left earlier"
        )
        for what, stack in s.get("stacks", {}).items():
            print(
                f"  call stack at the {what}: {stack['modules']} modules, "
                f"{stack['back_and_forth']} back-and-forth: {' > '.join(stack['chain'])}"
            )
