"""A request record is built and read by its fields' names, never by position (issue 51, item 4).

43 values in a row are easy to put one place off, and a positional call gives no error when they
are: two columns of one type swap silently. `RequestRecord` is built by keyword, or (on the client's
hot path, where 43 keywords cost 2.3 us a request) stored field by field into
`RequestRecord.unset()`; a row is read with the indexes `run_format/records.py` takes from `COLUMNS`.
"""

from __future__ import annotations

import ast
import os

from support import ROOT, parse_file, python_files

from vllm_load.run_format.records import COLUMNS

REQUEST_PY = os.path.join(ROOT, "vllm_load", "client", "request.py")


def _calls_to(tree: ast.AST, name: str):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if called == name:
                yield node


def test_no_record_is_built_by_position():
    positional = [
        f"{os.path.relpath(path, ROOT)}:{call.lineno}"
        for top in ("vllm_load", "bench", "tests")
        for path in python_files(top)
        for call in _calls_to(parse_file(path), "RequestRecord")
        if call.args
    ]
    assert not positional, f"RequestRecord built with positional arguments at {positional}"


def _method(tree: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    (found,) = [
        node
        for klass in tree.body
        if isinstance(klass, ast.ClassDef) and klass.name == cls
        for node in klass.body
        if isinstance(node, ast.FunctionDef) and node.name == name
    ]
    return found


def test_the_client_stores_every_field_of_its_record_once_by_name():
    """`MeasuredRequest.record()` starts from `RequestRecord.unset()` and stores each column once:
    a column left out would raise only when the row is made, one stored twice hides a mistake."""
    record = _method(parse_file(REQUEST_PY), "MeasuredRequest", "record")
    unset = [
        node.targets[0].id
        for node in ast.walk(record)
        if isinstance(node, ast.Assign)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Attribute)
        and node.value.func.attr == "unset"
        and isinstance(node.targets[0], ast.Name)
    ]
    assert len(unset) == 1, "record() builds its record from one RequestRecord.unset()"
    stored = [
        target.attr
        for node in ast.walk(record)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute)
        and isinstance(target.value, ast.Name)
        and target.value.id == unset[0]
    ]
    assert sorted(stored) == sorted(COLUMNS), (
        f"left out: {sorted(set(COLUMNS) - set(stored))}; "
        f"stored twice: {sorted({s for s in stored if stored.count(s) > 1})}; "
        f"not a column: {sorted(set(stored) - set(COLUMNS))}"
    )


def test_no_row_is_read_by_a_literal_index():
    """A record's row (`row`) is indexed by the named indexes of records.py, not by a number."""
    literal = [
        f"{os.path.relpath(path, ROOT)}:{node.lineno}"
        for path in python_files(os.path.join("vllm_load", "run"))
        for node in ast.walk(parse_file(path))
        if isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "row"
        and isinstance(node.slice, ast.Constant)
        and isinstance(node.slice.value, int)
    ]
    assert not literal, f"a row read by a literal index at {literal}"
