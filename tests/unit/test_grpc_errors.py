"""gRPC status codes ↔ the error tree (tidb_binlog/grpc_errors.py), and the rule that
the callers and servers translate through it and nowhere else."""

from __future__ import annotations

import ast
from pathlib import Path

import grpc
import pytest

from tidb_binlog import errors, grpc_errors
from tidb_binlog.grpc_errors import abort, damaged_error, from_rpc_error, status_of

ROOT = Path(__file__).resolve().parents[2]


class FakeRpcError(grpc.RpcError):
    """What a failed call raises: a code and details (as grpc's _InactiveRpcError)."""

    def __init__(self, code: grpc.StatusCode, details: str):
        self._code, self._details = code, details

    def code(self):
        return self._code

    def details(self):
        return self._details


class FakeContext:
    def __init__(self):
        self.aborted = None

    def abort(self, code, details):
        self.aborted = (code, details)
        raise grpc.RpcError(details)


def _back(err: errors.BinlogError, **kw) -> errors.BinlogError:
    """``err`` answered by a server, as the caller sees it."""
    context = FakeContext()
    with pytest.raises(grpc.RpcError):
        abort(context, err)
    code, details = context.aborted
    assert details == str(err)
    return from_rpc_error(FakeRpcError(code, details), "pump p1 at h:8250", "h:8250", **kw)


@pytest.mark.parametrize("err", [
    errors.ClusterIDMismatch("cluster ID are mismatch, 8 vs 7", expected=7, got=8),
    errors.PurgedError("requested ts 5 is below gc_ts 9", requested_ts=5, gc_ts=9),
    errors.DamagedBinlog("the binlog at ts 77 fails its checksum", path="p", offset=1, ts=77),
    errors.Unimplemented("DumpBinlog is not implemented by this drainer"),
    errors.ProtocolError("malformed binlog payload"),
    errors.UnavailableError("drainer could not merge the new pump"),
], ids=lambda e: type(e).__name__)
def test_a_servers_error_reaches_the_caller_as_the_same_class(err):
    back = _back(err, cluster_id=8, since_ts=5)
    assert type(back) is type(err)
    assert str(err) in str(back) and str(back).startswith("pump p1 at h:8250")


def test_the_caller_side_fills_in_what_it_knows():
    assert _back(errors.ClusterIDMismatch("x"), cluster_id=8).got == 8
    purged = _back(errors.PurgedError("x"), since_ts=5)
    assert purged.requested_ts == 5 and "restart the drainer from a newer" in str(purged)
    assert _back(errors.DamagedBinlog("the binlog at ts 77 is damaged")).ts == 77


def test_status_codes_of_our_errors():
    assert status_of(errors.StateError("no online: paused")) == grpc.StatusCode.UNAVAILABLE
    assert status_of(errors.TornTail("x")) == grpc.StatusCode.INTERNAL  # not a pull's error
    assert status_of(errors.BinlogError("x")) == grpc.StatusCode.INTERNAL


@pytest.mark.parametrize("code, cls", [
    (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.ProtocolError),
    (grpc.StatusCode.INVALID_ARGUMENT, errors.ProtocolError),
    (grpc.StatusCode.UNIMPLEMENTED, errors.Unimplemented),
    (grpc.StatusCode.DEADLINE_EXCEEDED, errors.UnavailableError),
    (grpc.StatusCode.CANCELLED, errors.UnavailableError),
    (grpc.StatusCode.PERMISSION_DENIED, errors.UnavailableError),
    (grpc.StatusCode.INTERNAL, errors.UnavailableError),
])
def test_codes_no_server_of_ours_sends(code, cls):
    err = from_rpc_error(FakeRpcError(code, "why"), "pump p1 at h:1", "h:1")
    assert type(err) is cls and "why" in str(err)
    assert code.name in str(err) or cls is errors.Unimplemented


def test_an_unreachable_peer_says_what_tls_to_set():
    err = from_rpc_error(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "Socket closed"),
                         "pump p1 at h:1", "h:1", client_tls=False)
    assert type(err) is errors.UnavailableError and "set [security] ssl-ca" in str(err)
    err = from_rpc_error(grpc.RpcError("no code at all"), "drainer at h:2", "h:2")
    assert type(err) is errors.UnavailableError and "UNKNOWN: no code at all" in str(err)


def test_damaged_error_reads_the_ts_from_the_detail():
    err = damaged_error("pump p1", "the binlog at ts 42 fails its checksum")
    assert err.ts == 42 and str(err).startswith("pump p1 cannot serve an acknowledged binlog")
    assert damaged_error("pump p1", "no ts here", ts=7, path="f", offset=3).offset == 3


# -- one boundary per side ------------------------------------------------------------------

CALLERS = {"tidb_binlog/pump_client/transport.py", "tidb_binlog/drainer/source/pump_source.py",
           "tidb_binlog/pump/transport.py"}
SERVERS = {"tidb_binlog/pump/grpc_server.py", "tidb_binlog/drainer/service/cistern.py"}


def _modules():
    for package in ("tidb_binlog", "actors", "cluster", "spark_on_ray"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_pb2" not in path.name:
                yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text())


def _catches_rpc_error(tree) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ExceptHandler) and node.type is not None \
                and "RpcError" in ast.unparse(node.type):
            return True
    return False


def _status_codes_aborted_with(tree) -> set[str]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr == "abort" and node.args \
                and isinstance(node.args[0], ast.Attribute) \
                and ast.unparse(node.args[0]).startswith("grpc.StatusCode."):
            out.add(node.args[0].attr)
    return out


def test_rpc_errors_are_caught_only_by_the_callers_that_translate_them():
    catching = {rel for rel, tree in _modules() if _catches_rpc_error(tree)}
    assert catching == CALLERS
    for rel in CALLERS:
        assert "from_rpc_error(" in (ROOT / rel).read_text(), rel


def test_servers_abort_with_our_errors_not_with_status_codes():
    """A status code written by hand is only PERMISSION_DENIED (a TLS peer's common name,
    no error of ours); every other abort goes through grpc_errors.abort."""
    for rel, tree in _modules():
        if rel == "tidb_binlog/grpc_errors.py":
            continue
        assert _status_codes_aborted_with(tree) <= {"PERMISSION_DENIED"}, rel
    for rel in SERVERS:
        assert "abort(context, " in (ROOT / rel).read_text(), rel


def test_the_boundary_checks_can_fail():
    tree = ast.parse("try:\n    f()\nexcept grpc.RpcError as e:\n    pass\n"
                     "context.abort(grpc.StatusCode.DATA_LOSS, 'x')\n")
    assert _catches_rpc_error(tree)
    assert _status_codes_aborted_with(tree) == {"DATA_LOSS"}
    assert grpc_errors.__all__ == ["status_of", "abort", "from_rpc_error", "damaged_error"]
