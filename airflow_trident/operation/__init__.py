"""Operations: the contracts users implement and the built-ins."""

from __future__ import annotations

from airflow_trident.operation.base import (
    Aggregator,
    ColumnFunction,
    CombinerAggregator,
    Consumer,
    Filter,
    FlatMapFunction,
    Function,
    MapFunction,
    OperationContext,
    QueryFunction,
    ReducerAggregator,
    StateUpdater,
)
from airflow_trident.operation.builtin import (
    Count,
    Debug,
    Equals,
    FilterNull,
    FirstN,
    MapGet,
    Max,
    Min,
    Split,
    Sum,
    TupleCollectionGet,
)

__all__ = [
    "Aggregator",
    "ColumnFunction",
    "CombinerAggregator",
    "Consumer",
    "Count",
    "Debug",
    "Equals",
    "FilterNull",
    "Filter",
    "FirstN",
    "FlatMapFunction",
    "Function",
    "MapFunction",
    "MapGet",
    "Max",
    "Min",
    "OperationContext",
    "QueryFunction",
    "ReducerAggregator",
    "Split",
    "StateUpdater",
    "Sum",
    "TupleCollectionGet",
]
