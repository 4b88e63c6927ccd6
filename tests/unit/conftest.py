"""Fixtures of the unit tests.

- ``row_args_impl``: module-scoped, parametrized ``compiled`` / ``python``: while a
  module's tests run, ``tidb_binlog.codec.row_args`` decodes old-format rows with that
  implementation (``_rowfast.decode_old_args`` or the reference
  ``_decode_old_args_py``). Use it with ``pytestmark = pytest.mark.usefixtures(...)``.
  ``compiled`` skips when the module is off: ``TIDB_BINLOG_PURE_PYTHON`` is set, or it
  was never built (then test_codec_rowfast.py fails).
"""

from __future__ import annotations

import pytest

from tidb_binlog.codec import row_args


@pytest.fixture(scope="module", params=["compiled", "python"])
def row_args_impl(request):
    if request.param == "compiled":
        if not row_args.COMPILED:
            why = ("TIDB_BINLOG_PURE_PYTHON is set" if row_args._pure_python_requested()
                   else "not built")
            pytest.skip(f"tidb_binlog.codec._rowfast is off ({why})")
        impl = row_args._rowfast.decode_old_args
    else:
        impl = row_args._decode_old_args_py
    saved = row_args._decode_old_args
    row_args._decode_old_args = impl
    try:
        yield request.param
    finally:
        row_args._decode_old_args = saved
