"""A per-tuple ``Function`` whose ``execute`` emits exactly once, or a ``Filter``, run as one
comprehension over a batch's columns.

Many functions are written as one expression of the tuple's fields::

    def execute(self, tuple_, collector):
        word = tuple_.get("word")
        collector.emit((word.lower(),))

Called once per record, such a function pays for a
:class:`~airflow_trident.tuple.TridentTuple`, a call to ``execute`` and a call to ``emit``
per record; a pandas UDF doing the same Python pays none of them. :func:`inline_execute` turns
the body of such an ``execute`` into one list comprehension over the input columns: the same
expressions, evaluated in the same order, in the function's own globals, with ``self`` the
same instance. The Spark runtime's column path runs it (``runtime/spark/columnar.py``).

What is inlined, and nothing else (anything else returns ``None`` and the function is called
once per tuple, as before):

- ``execute(self, t, c)``: three positional parameters, no defaults, no closure (no ``super()``,
  no variables of an enclosing function); decorators are allowed when they return the
  function itself;
- a body of a docstring, then assignments to names (``x = ...``, ``x, y = ...``), then exactly
  one ``c.emit(values)`` — so every record emits exactly one tuple;
- the tuple read only as ``t[i]`` (a constant index) or ``t.get("field")`` (a constant name);
  the collector not used otherwise;
- no lambda, comprehension, ``:=``, ``yield`` or ``await`` in the expressions, and no name read
  before the body assigns it.

A ``Filter``'s ``is_keep(self, t)`` inlines under the same rules when its body is
assignments, then ``return <expression>`` (:func:`inline_is_keep`).

The source is checked against the running code: it is compiled again and its bytecode, names
and constants (by type and value: ``2``, ``2.0`` and ``True`` differ) must equal those of the
function's code (a file edited after the import, or a
function made some other way, is not inlined). The source is read where the topology is
defined (:func:`execute_source`, e.g. the Spark driver) and travels with the plan, so a worker
without the DAG file still inlines.

>>> from airflow_trident.operation.base import Function
>>> class Lower(Function):
...     def execute(self, tuple_, collector):
...         word = tuple_.get("word")
...         collector.emit([word.lower(), len(word)])
>>> run = inline_execute(Lower(), execute_source(Lower()), ("n", "word"))
>>> run.fields, run.width
(('word',), 2)
>>> run([["The", "COW"]], width=2)
[['the', 'cow'], [3, 3]]
"""

from __future__ import annotations

import ast
import dis
import inspect
import itertools
import operator
import textwrap
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_trident.tuple import Fields

__all__ = [
    "InlinedExecute",
    "InlinedKeep",
    "UserCodeError",
    "WrongWidth",
    "execute_source",
    "inline_execute",
    "inline_is_keep",
    "method_source",
]

_PREFIX = "_trident_"
_ROWS, _TUPLE = f"{_PREFIX}rows", f"{_PREFIX}tuple"
_INDEX, _EMITTED, _KEEP = f"{_PREFIX}i", f"{_PREFIX}e", f"{_PREFIX}r"
_LEN, _WIDTH, _WRONG = f"{_PREFIX}len", f"{_PREFIX}width", f"{_PREFIX}wrong"
_SCOPES = (
    ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.NamedExpr,
    ast.Yield, ast.YieldFrom, ast.Await,
)  # fmt: skip
# flags that change what a code object does (CO_NESTED and the __future__ flags do not)
_FLAGS = (
    inspect.CO_VARARGS | inspect.CO_VARKEYWORDS | inspect.CO_GENERATOR | inspect.CO_COROUTINE
    | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR
)  # fmt: skip


_JUMPS = frozenset(dis.hasjrel) | frozenset(dis.hasjabs)


class _NotInlined(Exception):
    """The body is not of the inlined form."""


class UserCodeError(Exception):
    """The user's code raised :attr:`error` on record :attr:`index` of the columns; ``named``
    is false when it raised taking the truthiness of what ``is_keep`` returned (the local
    runtime names no record then)."""

    def __init__(self, index: int, error: Exception, *, named: bool = True) -> None:
        super().__init__(index, error)
        self.index, self.error, self.named = index, error, named


class WrongWidth(ValueError):
    """Record :attr:`index` emitted :attr:`emitted`, not as many values as declared."""

    def __init__(self, index: int, emitted: tuple[Any, ...], width: int) -> None:
        super().__init__(f"record {index} emitted {len(emitted)} values {emitted!r}, not {width}")
        self.index, self.emitted = index, emitted


def _wrong(emitted: tuple[Any, ...], width: int) -> bool:
    raise WrongWidth(-1, emitted, width)


@dataclass(frozen=True)
class InlinedExecute:
    """``execute`` as a comprehension: called with the columns of :attr:`fields` (Python
    lists, as long as the batch), it returns the emitted values as columns.

    ``width``: how many values each emit has, when the body emits a tuple or list display
    (``None``: counted per record, as each record's emit is made). With a display of one
    value, the comprehension makes that value's column itself.
    """

    fields: Fields
    width: int | None
    instance: Any
    comprehension: Callable[..., list[Any]]

    def fits(self, width: int) -> bool:
        """Its emits can have ``width`` values (a display of another width never does)."""
        return self.width is None or self.width == width

    def __call__(self, columns: Sequence[list[Any]], width: int, count: int = 0) -> list[list[Any]]:
        """The ``width`` output columns of the records of ``columns`` (``count`` records
        when the body reads no field), each record's expressions evaluated once, in order.

        Raises
        ------
        UserCodeError
            The user's code raised on a record (the records after it did not run).
        WrongWidth
            A record emitted not ``width`` values (the records after it did not run).
        ValueError
            The body's display has not ``width`` values (:meth:`fits`): nothing ran.
        """
        if not self.fits(width):
            raise ValueError(width)
        counter = itertools.count()
        try:
            out = self.comprehension(
                self.instance, _rows(columns, count, counter), tuple, len, width, _wrong
            )
        except WrongWidth as exc:
            raise WrongWidth(next(counter) - 1, exc.emitted, width) from None
        except Exception as exc:
            raise UserCodeError(next(counter) - 1, exc) from exc
        if self.width == 1:
            return [out]
        return [list(map(operator.itemgetter(i), out)) for i in range(width)]


@dataclass(frozen=True)
class InlinedKeep:
    """A filter's ``is_keep`` as a comprehension: called with the columns of :attr:`fields`,
    it returns the positions of the records kept (where ``is_keep`` returns something true,
    its truthiness taken record by record, as each record is checked)."""

    fields: Fields
    instance: Any
    comprehension: Callable[..., list[int]]
    truthiness: frozenset[tuple[types.CodeType, int]] = frozenset()

    def __call__(self, columns: Sequence[list[Any]], count: int = 0) -> list[int]:
        """The positions of the records of ``columns`` ``is_keep`` keeps (``count`` records
        when the body reads no field).

        Raises
        ------
        UserCodeError
            The user's code raised on a record, or taking the truthiness of what it returned
            for it (the records after it did not run).
        """
        counter = itertools.count()
        try:
            return self.comprehension(self.instance, _rows(columns, count, counter))
        except Exception as exc:
            index = next(counter) - 1
            raise UserCodeError(index, exc, named=not self._in_truthiness(exc)) from exc

    def _in_truthiness(self, exc: BaseException) -> bool:
        """``exc`` was raised by the comprehension's ``if`` on what ``is_keep`` returned."""
        tb = exc.__traceback__
        while tb is not None:
            if (tb.tb_frame.f_code, tb.tb_lasti) in self.truthiness:
                return True
            tb = tb.tb_next
        return False


def method_source(operation: object, method: str = "execute") -> str | None:
    """The source of ``operation``'s ``method`` (``None`` when it has none to read)."""
    func = _plain_method(operation, method)
    if func is None:
        return None
    try:
        return textwrap.dedent(inspect.getsource(func))
    except Exception:  # no file, a builtin, or inspect's own failures: then it is not inlined
        return None


def execute_source(function: object) -> str | None:
    """The source of ``function``'s ``execute`` (``None`` when it has none to read)."""
    return method_source(function, "execute")


def inline_execute(
    function: object, source: str | None, input_fields: Sequence[str]
) -> InlinedExecute | None:
    """``function.execute`` (of ``source``, from :func:`execute_source`) as a comprehension
    over the columns of ``input_fields``, or ``None`` when its body is not of the inlined
    form or ``source`` is not the running code."""
    made = _inline(function, "execute", source, tuple(input_fields))
    return None if made is None else InlinedExecute(made[0], made[1], function, made[2])


def inline_is_keep(
    filter_: object, source: str | None, input_fields: Sequence[str]
) -> InlinedKeep | None:
    """``filter_.is_keep`` (of ``source``, from ``method_source(filter_, "is_keep")``) as a
    comprehension: a body of assignments, then ``return <expression>``, under the rules of
    ``execute`` (the module's docstring); else ``None``.

    >>> from airflow_trident.operation.base import Filter
    >>> class Long(Filter):
    ...     def is_keep(self, tuple_):
    ...         return len(tuple_.get("word")) > 3
    >>> keep = inline_is_keep(Long(), method_source(Long(), "is_keep"), ["word"])
    >>> keep([["the", "moon", "cow", "jumped"]])
    [1, 3]
    """
    made = _inline(filter_, "is_keep", source, tuple(input_fields))
    if made is None:
        return None
    return InlinedKeep(made[0], filter_, made[2], _truthiness(made[2].__code__))


def _truthiness(code: types.CodeType) -> frozenset[tuple[types.CodeType, int]]:
    """Where the comprehension of ``code`` takes the truthiness of ``is_keep``'s value: the
    conditional jumps right after it is loaded (in ``code`` or the comprehension's own code)."""
    found: set[tuple[types.CodeType, int]] = set()
    codes = [code, *(c for c in code.co_consts if isinstance(c, types.CodeType))]
    for each in codes:
        before = None
        for instruction in dis.get_instructions(each):
            jump = instruction.opname
            if before is not None and before.argval == _KEEP and "JUMP" in jump and "IF" in jump:
                found.add((each, instruction.offset))
            before = instruction if instruction.opname == "LOAD_FAST" else None
    return frozenset(found)


def _rows(columns: Sequence[list[Any]], count: int, counter: Iterator[int]) -> Any:
    """The records of ``columns``, each after its position from ``counter`` (which so tells
    how many records were taken): ``(i, value)`` (one column), ``(i, value, value, ...)``
    (several), or ``(i, i)`` for ``count`` records (none)."""
    if not columns:
        return zip(counter, range(count), strict=False)
    return zip(counter, *columns, strict=False)


def _inline(
    operation: object, method: str, source: str | None, fields: Fields
) -> tuple[Fields, int | None, types.FunctionType] | None:
    """The fields read, the emits' width and the comprehension of ``operation.method``."""
    func = _plain_method(operation, method)
    if func is None or source is None or func.__code__.co_freevars:
        return None
    try:
        tree = ast.increment_lineno(ast.parse(source), func.__code__.co_firstlineno - 1)
        definition = tree.body[0] if len(tree.body) == 1 else None
        if not isinstance(definition, ast.FunctionDef) or definition.name != func.__name__:
            return None
        definition.decorator_list = []
        if not _same_code(definition, func.__code__):
            return None
        body, read, width = _comprehension(definition, fields, emits=method == "execute")
        module = compile(ast.fix_missing_locations(body), func.__code__.co_filename, "exec")
    except Exception:  # not of the form, or anything unforeseen: called per tuple instead
        return None
    code = next(c for c in module.co_consts if isinstance(c, types.CodeType))
    return read, width, types.FunctionType(code, func.__globals__)


def _plain_method(operation: object, method: str) -> types.FunctionType | None:
    """The class's ``method`` function, when ``operation.method`` is it, bound."""
    bound = getattr(operation, method, None)
    func = getattr(type(operation), method, None)
    if not isinstance(func, types.FunctionType) or not inspect.ismethod(bound):
        return None
    return func if bound.__func__ is func and bound.__self__ is operation else None


def _same_code(definition: ast.FunctionDef, running: types.CodeType) -> bool:
    """``definition`` compiles to ``running``'s instructions, names and constants."""
    module = compile(ast.Module([definition], []), running.co_filename, "exec")
    code = next((c for c in module.co_consts if isinstance(c, types.CodeType)), None)
    return code is not None and _code_key(code) == _code_key(running)


def _code_key(code: types.CodeType) -> tuple[Any, ...]:
    """What ``code`` does: its instructions, names, constants (by type and value), arguments and
    flags (not its name, file or line numbers)."""
    return (
        tuple(map(_constant_key, code.co_consts)),
        code.co_names, code.co_varnames, code.co_cellvars, code.co_freevars,
        code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
        code.co_flags & _FLAGS,
        tuple(_instructions(code)),
    )  # fmt: skip


def _constant_key(value: Any) -> Any:
    """``value`` as a key equal only for a constant of the same type and value: ``2``, ``2.0``
    and ``True`` compare equal, ``0.0`` and ``-0.0`` too, and ``(1, 2) == (1.0, 2)``; their
    keys do not.

    >>> _constant_key(2) == _constant_key(2.0), _constant_key(0.0) == _constant_key(-0.0)
    (False, False)
    >>> _constant_key((1, "a")) == _constant_key((1, "a"))
    True
    """
    if isinstance(value, tuple):
        return (tuple, tuple(map(_constant_key, value)))
    if isinstance(value, frozenset):
        return (frozenset, frozenset(map(_constant_key, value)))
    if isinstance(value, types.CodeType):
        return (types.CodeType, _code_key(value))
    if isinstance(value, float | complex):
        return (type(value), repr(value))  # -0.0 and nan: by their spelling
    return (type(value), value)


def _instructions(code: types.CodeType) -> list[tuple[str, Any]]:
    """``code``'s instructions, jumps to instruction numbers. A method call on a module
    is a ``LOAD_ATTR`` where the module imports that name and a ``LOAD_METHOD`` where it
    does not (Python 3.11), so the two count as one."""
    instructions = list(dis.get_instructions(code))
    number = {instruction.offset: n for n, instruction in enumerate(instructions)}
    return [
        (
            "LOAD_ATTR" if i.opname == "LOAD_METHOD" else i.opname,
            number.get(i.argval) if i.opcode in _JUMPS else _constant_key(i.argval),
        )
        for i in instructions
    ]


def _comprehension(
    definition: ast.FunctionDef, fields: Fields, *, emits: bool
) -> tuple[ast.Module, Fields, int | None]:
    """The module defining the comprehension's function, the fields it reads and the width
    of its emits (``None`` when not a display). ``emits``: ``execute(self, t, c)`` ending in
    ``c.emit(...)``; else ``is_keep(self, t)`` ending in ``return ...``."""
    args = definition.args
    params = [a.arg for a in (*args.posonlyargs, *args.args)]
    if len(params) != 2 + emits or args.vararg or args.kwarg or args.kwonlyargs or args.defaults:
        raise _NotInlined
    self_name, tuple_name, *collector = params
    body = list(definition.body)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if not body:
        raise _NotInlined
    *assignments, last = body
    if emits:
        result = _emitted(last, collector[0])
    elif isinstance(last, ast.Return) and last.value is not None:
        result = last.value
    else:
        raise _NotInlined
    used: dict[int, str] = {}
    reads = _Reads(tuple_name, fields, used)
    assigned: set[str] = set()
    local = {self_name, tuple_name, *collector}
    steps = [_assignment(statement, local) for statement in assignments]
    local |= {name for _, names in steps for name in names}
    clauses: list[tuple[ast.expr, ast.expr]] = []
    for statement, names in steps:
        value = reads.rewrite(statement.value, local - assigned - {self_name})
        clauses.append((statement.targets[0], ast.List([value], ast.Load())))
        assigned |= names
    element = reads.rewrite(result, local - assigned - {self_name})
    width: int | None = None
    if emits:
        element, width = _as_tuple(element)
    order = sorted(used)
    variables = [used[i] for i in order] or [f"{_PREFIX}n"]
    target = ast.Tuple([ast.Name(n, ast.Store()) for n in (_INDEX, *variables)], ast.Store())
    generators = [ast.comprehension(target, ast.Name(_ROWS, ast.Load()), [], 0)]
    generators += [ast.comprehension(t, v, [], 0) for t, v in clauses]
    if emits and width is None:  # each emit's width checked as it is made
        check = ast.BoolOp(ast.Or(), [
            ast.Compare(
                ast.Call(ast.Name(_LEN, ast.Load()), [ast.Name(_EMITTED, ast.Load())], []),
                [ast.Eq()], [ast.Name(_WIDTH, ast.Load())],
            ),
            ast.Call(ast.Name(_WRONG, ast.Load()),
                     [ast.Name(_EMITTED, ast.Load()), ast.Name(_WIDTH, ast.Load())], []),
        ])  # fmt: skip
        made = ast.List([element], ast.Load())
        generators.append(ast.comprehension(ast.Name(_EMITTED, ast.Store()), made, [check], 0))
        element = ast.Name(_EMITTED, ast.Load())
    if not emits:  # the record's position, where what is_keep returns is true
        made = ast.List([element], ast.Load())
        keep = ast.Name(_KEEP, ast.Load())
        generators.append(ast.comprehension(ast.Name(_KEEP, ast.Store()), made, [keep], 0))
        element = ast.Name(_INDEX, ast.Load())
    inputs = (self_name, _ROWS, _TUPLE, _LEN, _WIDTH, _WRONG) if emits else (self_name, _ROWS)
    function = ast.FunctionDef(
        f"{definition.name}_inlined",  # its frame's name from Python 3.12 (PEP 709)
        ast.arguments([], [ast.arg(n) for n in inputs], None, [], [], None, []),
        [ast.Return(ast.ListComp(element, generators))],
        [],
        None,
    )
    return ast.Module([function], []), tuple(fields[i] for i in order), width


def _as_tuple(emitted: ast.expr) -> tuple[ast.expr, int | None]:
    """What the comprehension makes of an emit's values, and their count when fixed: the
    value itself for a display of one, a tuple display for a display of several, else
    ``tuple(values)`` (as ``emit`` copies them)."""
    if isinstance(emitted, ast.Tuple | ast.List) and not any(
        isinstance(e, ast.Starred) for e in emitted.elts
    ):
        width = len(emitted.elts)
        return (emitted.elts[0] if width == 1 else ast.Tuple(emitted.elts, ast.Load())), width
    return ast.Call(ast.Name(_TUPLE, ast.Load()), [emitted], []), None


def _emitted(statement: ast.stmt, collector: str) -> ast.expr:
    """The argument of the body's last statement, ``collector.emit(values)``."""
    call = statement.value if isinstance(statement, ast.Expr) else None
    if not (
        isinstance(call, ast.Call)
        and isinstance(call.func, ast.Attribute)
        and isinstance(call.func.value, ast.Name)
        and call.func.value.id == collector
        and call.func.attr == "emit"
        and len(call.args) == 1
        and not call.keywords
        and not isinstance(call.args[0], ast.Starred)
    ):
        raise _NotInlined
    return call.args[0]


def _assignment(statement: ast.stmt, taken: set[str]) -> tuple[ast.Assign, set[str]]:
    """An assignment ``x = ...`` or ``x, y = ...``, and the names it binds (none of
    ``taken``)."""
    if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
        raise _NotInlined
    target = statement.targets[0]
    names = target.elts if isinstance(target, ast.Tuple | ast.List) else [target]
    bound = [n.id for n in names if isinstance(n, ast.Name)]
    if len(bound) != len(names) or len(set(bound)) != len(bound) or set(bound) & taken:
        raise _NotInlined
    if any(n.startswith(_PREFIX) for n in bound):
        raise _NotInlined
    return statement, set(bound)


def _constant_int(node: ast.expr) -> int:
    """The value of ``3`` or ``-1`` (an ``int``, not a ``bool``)."""
    negative = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
    value = node.operand if isinstance(node, ast.UnaryOp) and negative else node
    if not (isinstance(value, ast.Constant) and type(value.value) is int):
        raise _NotInlined
    return -value.value if negative else value.value


class _Reads(ast.NodeTransformer):
    """Rewrites the tuple's reads ``t[i]`` / ``t.get("f")`` into the field's column variable
    (recording it in ``used``); refuses any other use of the tuple, names not yet bound
    (``unbound``: the collector is one), and nodes that open a scope."""

    def __init__(self, tuple_name: str, fields: Fields, used: dict[int, str]):
        self.tuple_name, self.fields, self.used = tuple_name, fields, used
        self.unbound: set[str] = set()

    def rewrite(self, node: ast.expr, unbound: set[str]) -> ast.expr:
        self.unbound = unbound
        return self.visit(node)  # type: ignore[no-any-return]

    def _field(self, index: int) -> ast.Name:
        self.used.setdefault(index, f"{_PREFIX}v{index}")
        return ast.Name(self.used[index], ast.Load())

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        if isinstance(node.value, ast.Name) and node.value.id == self.tuple_name:
            index = _constant_int(node.slice)
            position = index + len(self.fields) if index < 0 else index
            if not 0 <= position < len(self.fields):
                raise _NotInlined
            return self._field(position)
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == self.tuple_name
        ):
            (name,) = node.args if len(node.args) == 1 and not node.keywords else (None,)
            if not (func.attr == "get" and isinstance(name, ast.Constant)):
                raise _NotInlined
            if name.value not in self.fields:
                raise _NotInlined
            return self._field(self.fields.index(name.value))
        return self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.unbound or node.id.startswith(_PREFIX):
            raise _NotInlined
        return node

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, _SCOPES):
            raise _NotInlined
        return super().generic_visit(node)
