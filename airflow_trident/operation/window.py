"""Window configurations (Trident's ``org.apache.storm.trident.windowing.config``).

A window collects a partition's tuples *across batches* and, when it is complete, aggregates
them; the results go down the stream in the batch in which the window fired.

* :class:`TumblingCountWindow` / :class:`SlidingCountWindow`: by tuple count. A tumbling window
  of ``n`` fires every ``n`` tuples with those ``n``; a sliding window of ``n`` sliding by ``s``
  fires every ``s`` tuples with the last ``n`` (fewer at the start, as in Storm).
* :class:`TumblingDurationWindow` / :class:`SlidingDurationWindow`: by time. Windows are
  ``[end - length, end)`` with ``end`` a multiple of the slide (tumbling: slide = length),
  aligned on the epoch. By default the time is *processing time*: the time (``clock()``, default
  ``time.time``) at which a batch's tuples entered the window, and a window fires in the first
  batch processed once the clock passed its end. With ``timestamp_field`` it is *event time*:
  each tuple's own time (seconds, or a ``datetime``); the watermark is the largest timestamp
  seen minus ``lag``, a window fires in the batch whose tuples move the watermark past its end,
  and a tuple older than the watermark of the batches before it is late and dropped (logged).
  Windows with no tuples never fire.

Examples
--------
>>> from datetime import timedelta
>>> TumblingCountWindow.of(3)
TumblingCountWindow(window_count=3)
>>> SlidingCountWindow.of(10, 5).slide
5
>>> w = SlidingDurationWindow.of(timedelta(minutes=1), timedelta(seconds=20), timestamp_field="ts")
>>> w.length, w.slide, w.timestamp_field
(60.0, 20.0, 'ts')
>>> SlidingCountWindow.of(2, 3)
Traceback (most recent call last):
...
airflow_trident.errors.ConfigurationError: SlidingCountWindow: the slide (3) must not exceed ...
"""

from __future__ import annotations

import datetime
import numbers
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_trident.errors import ConfigurationError
from airflow_trident.operation.base import StateUpdater
from airflow_trident.tuple import TridentCollector, TridentTuple

__all__ = [
    "DurationLike",
    "SlidingCountWindow",
    "SlidingDurationWindow",
    "TumblingCountWindow",
    "TumblingDurationWindow",
    "WindowConfig",
    "WindowStoreCommit",
    "as_seconds",
]

DurationLike = datetime.timedelta | int | float
"""A duration: a ``timedelta``, or a number of seconds."""


def as_seconds(value: DurationLike, what: str) -> float:
    """``value`` in seconds (> 0).

    Raises
    ------
    ConfigurationError
        If ``value`` is not a positive duration.
    """
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
    else:
        msg = f"{what} must be a timedelta or a number of seconds, got {value!r}"
        raise ConfigurationError(msg)
    if not seconds > 0:
        msg = f"{what} must be positive, got {value!r}"
        raise ConfigurationError(msg)
    return seconds


def _count(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        msg = f"{what} must be an int >= 1, got {value!r}"
        raise ConfigurationError(msg)
    return value


class WindowConfig:
    """A window's shape: by ``count`` or by ``duration``, its ``length`` and ``slide``."""

    kind: str = ""

    @property
    def length(self) -> float:
        """The window's length (tuples, or seconds)."""
        raise NotImplementedError

    @property
    def slide(self) -> float:
        """How far consecutive windows are apart (tuples, or seconds)."""
        raise NotImplementedError

    @property
    def by_count(self) -> bool:
        """Whether the window counts tuples (else it measures time)."""
        return self.kind == "count"


@dataclass(frozen=True)
class TumblingCountWindow(WindowConfig):
    """Every ``window_count`` tuples, those tuples."""

    window_count: int
    kind = "count"

    def __post_init__(self) -> None:
        _count(self.window_count, "TumblingCountWindow: window_count")

    @classmethod
    def of(cls, window_count: int) -> TumblingCountWindow:
        """Trident's ``TumblingCountWindow.of(windowLength)``."""
        return cls(window_count)

    @property
    def length(self) -> float:
        return self.window_count

    @property
    def slide(self) -> float:
        return self.window_count


@dataclass(frozen=True)
class SlidingCountWindow(WindowConfig):
    """Every ``sliding_count`` tuples, the last ``window_count``."""

    window_count: int
    sliding_count: int
    kind = "count"

    def __post_init__(self) -> None:
        _count(self.window_count, "SlidingCountWindow: window_count")
        _count(self.sliding_count, "SlidingCountWindow: sliding_count")
        if self.sliding_count > self.window_count:
            msg = (
                f"SlidingCountWindow: the slide ({self.sliding_count}) must not exceed the "
                f"window ({self.window_count}), else tuples between windows are lost; hint: "
                f"use TumblingCountWindow for back-to-back windows"
            )
            raise ConfigurationError(msg)

    @classmethod
    def of(cls, window_count: int, sliding_count: int) -> SlidingCountWindow:
        """Trident's ``SlidingCountWindow.of(windowCount, slidingCount)``."""
        return cls(window_count, sliding_count)

    @property
    def length(self) -> float:
        return self.window_count

    @property
    def slide(self) -> float:
        return self.sliding_count


@dataclass(frozen=True)
class _DurationWindow(WindowConfig):
    """Shared options of duration windows (see the module doc for the two kinds of time)."""

    timestamp_field: str | None = field(default=None, kw_only=True)
    lag: float = field(default=0.0, kw_only=True)
    clock: Callable[[], float] | None = field(default=None, kw_only=True, compare=False)
    kind = "duration"

    def _check_time(self, name: str) -> None:
        if self.lag < 0:
            msg = f"{name}: lag must be >= 0 seconds, got {self.lag!r}"
            raise ConfigurationError(msg)
        if self.timestamp_field is not None and self.clock is not None:
            msg = f"{name}: give a timestamp_field (event time) or a clock (processing time)"
            raise ConfigurationError(msg)

    def now(self) -> float:
        """The processing time now (``clock()``, default ``time.time()``)."""
        import time

        return float(self.clock() if self.clock is not None else time.time())


@dataclass(frozen=True)
class TumblingDurationWindow(_DurationWindow):
    """Back-to-back windows of ``window_duration`` seconds."""

    window_duration: float = 0.0

    def __post_init__(self) -> None:
        seconds = as_seconds(self.window_duration, "TumblingDurationWindow: window_duration")
        object.__setattr__(self, "window_duration", seconds)
        object.__setattr__(self, "lag", _lag(self.lag))
        self._check_time("TumblingDurationWindow")

    @classmethod
    def of(
        cls,
        window_duration: DurationLike,
        *,
        timestamp_field: str | None = None,
        lag: DurationLike = 0,
        clock: Callable[[], float] | None = None,
    ) -> TumblingDurationWindow:
        """Trident's ``TumblingDurationWindow.of(windowLength)``; ``timestamp_field``, ``lag``
        and ``clock`` choose the time (see the module doc)."""
        return cls(
            window_duration=window_duration,  # type: ignore[arg-type]
            timestamp_field=timestamp_field,
            lag=lag,  # type: ignore[arg-type]
            clock=clock,
        )

    @property
    def length(self) -> float:
        return self.window_duration

    @property
    def slide(self) -> float:
        return self.window_duration


@dataclass(frozen=True)
class SlidingDurationWindow(_DurationWindow):
    """Every ``sliding_duration`` seconds, the last ``window_duration`` seconds."""

    window_duration: float = 0.0
    sliding_duration: float = 0.0

    def __post_init__(self) -> None:
        length = as_seconds(self.window_duration, "SlidingDurationWindow: window_duration")
        slide = as_seconds(self.sliding_duration, "SlidingDurationWindow: sliding_duration")
        if slide > length:
            msg = (
                f"SlidingDurationWindow: the slide ({slide} s) must not exceed the window "
                f"({length} s), else tuples between windows are lost; hint: use "
                f"TumblingDurationWindow for back-to-back windows"
            )
            raise ConfigurationError(msg)
        object.__setattr__(self, "window_duration", length)
        object.__setattr__(self, "sliding_duration", slide)
        object.__setattr__(self, "lag", _lag(self.lag))
        self._check_time("SlidingDurationWindow")

    @classmethod
    def of(
        cls,
        window_duration: DurationLike,
        sliding_duration: DurationLike,
        *,
        timestamp_field: str | None = None,
        lag: DurationLike = 0,
        clock: Callable[[], float] | None = None,
    ) -> SlidingDurationWindow:
        """Trident's ``SlidingDurationWindow.of(windowDuration, slidingDuration)``."""
        return cls(
            window_duration=window_duration,  # type: ignore[arg-type]
            sliding_duration=sliding_duration,  # type: ignore[arg-type]
            timestamp_field=timestamp_field,
            lag=lag,  # type: ignore[arg-type]
            clock=clock,
        )

    @property
    def length(self) -> float:
        return self.window_duration

    @property
    def slide(self) -> float:
        return self.sliding_duration


def _lag(value: DurationLike) -> float:
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    msg = f"lag must be a timedelta or a number of seconds, got {value!r}"
    raise ConfigurationError(msg)


class WindowStoreCommit(StateUpdater[Any]):
    """The commit of a window's store: the window's results of a batch are only checked in;
    the store itself removes what the committed txid no longer needs (its ``commit``)."""

    def update_state(
        self, state: Any, tuples: Sequence[TridentTuple], collector: TridentCollector
    ) -> None:
        """Nothing to write: the results were stored when the batch was processed."""
