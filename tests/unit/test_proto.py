"""The protobuf interface: generated code is current, descriptors match the reference.

The tables below transcribe ../shared/reference/binlog-proto.md (TiDB's tipb binlog
protocol, tidb-binlog's pb_binlog file format, tidb-tools' secondary binlog).  Each
message is checked field by field: name, number, type (and the referenced message or
enum), and label; a field that is not in the table fails too.
"""

from __future__ import annotations

import difflib
import filecmp
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.descriptor import FieldDescriptor as FD

from tidb_binlog.proto import (
    binlog_pb2,
    cistern_pb2,
    pb_binlog_pb2,
    pump_pb2,
    secondary_binlog_pb2,
)

REPO = Path(__file__).resolve().parents[2]
PROTO_DIR = REPO / "tidb_binlog" / "proto"
GENERATED_GLOBS = ("*_pb2.py", "*_pb2.pyi", "*_pb2_grpc.py")

OPT, REP, REQ = "optional", "repeated", "required"
I32, I64, U64, BOOL, STR, BYTES, DBL = (FD.TYPE_INT32, FD.TYPE_INT64, FD.TYPE_UINT64,
                                        FD.TYPE_BOOL, FD.TYPE_STRING, FD.TYPE_BYTES,
                                        FD.TYPE_DOUBLE)


def enum(name):
    return (FD.TYPE_ENUM, name)


def msg(name):
    return (FD.TYPE_MESSAGE, name)


# module, package, proto2?, {message: [(field, number, type, label)]}, {enum: {name: number}}
SPEC = {
    "binlog.proto": (binlog_pb2, "binlog", True, {
        "TableMutation": [
            ("table_id", 1, I64, OPT), ("inserted_rows", 2, BYTES, REP),
            ("updated_rows", 3, BYTES, REP), ("deleted_ids", 4, I64, REP),
            ("deleted_pks", 5, BYTES, REP), ("deleted_rows", 6, BYTES, REP),
            ("sequence", 7, enum("binlog.MutationType"), REP),
        ],
        "PrewriteValue": [
            ("schema_version", 1, I64, OPT), ("mutations", 2, msg("binlog.TableMutation"), REP),
        ],
        "Binlog": [
            ("tp", 1, enum("binlog.BinlogType"), OPT), ("start_ts", 2, I64, OPT),
            ("commit_ts", 3, I64, OPT), ("prewrite_key", 4, BYTES, OPT),
            ("prewrite_value", 5, BYTES, OPT), ("ddl_query", 6, BYTES, OPT),
            ("ddl_job_id", 7, I64, OPT), ("ddl_schema_state", 8, I32, OPT),
        ],
    }, {
        "MutationType": {"Insert": 0, "Update": 1, "DeleteID": 2, "DeletePK": 3, "DeleteRow": 4},
        "BinlogType": {"Prewrite": 0, "Commit": 1, "Rollback": 2, "PreDDL": 3, "PostDDL": 4},
    }),
    "pump.proto": (pump_pb2, "binlog", False, {
        "WriteBinlogReq": [("clusterID", 1, U64, OPT), ("payload", 2, BYTES, OPT)],
        "WriteBinlogResp": [("errmsg", 1, STR, OPT)],
        "PullBinlogReq": [("clusterID", 1, U64, OPT), ("startFrom", 2, msg("binlog.Pos"), OPT)],
        "PullBinlogResp": [("entity", 1, msg("binlog.Entity"), OPT)],
        "Pos": [("suffix", 1, U64, OPT), ("offset", 2, I64, OPT)],
        "Meta": [("startTs", 1, I64, OPT), ("commitTs", 2, I64, OPT)],
        "Entity": [
            ("pos", 1, msg("binlog.Pos"), OPT), ("payload", 2, BYTES, OPT),
            ("checksum", 3, BYTES, OPT), ("meta", 4, msg("binlog.Meta"), OPT),
        ],
    }, {}),
    "cistern.proto": (cistern_pb2, "binlog", False, {
        "NotifyReq": [], "NotifyResp": [],
        "DumpBinlogReq": [("beginCommitTS", 1, I64, OPT)],
        "DumpBinlogResp": [("commitTS", 1, I64, OPT), ("payload", 2, BYTES, OPT),
                           ("ddljob", 3, BYTES, OPT)],
        "DumpDDLJobsReq": [("beginCommitTS", 1, I64, OPT)],
        "DumpDDLJobsResp": [("ddljobs", 1, BYTES, REP)],
    }, {}),
    "pb_binlog.proto": (pb_binlog_pb2, "pb_binlog", True, {
        "column": [
            ("name", 1, STR, OPT), ("tp", 2, BYTES, OPT), ("mysql_type", 3, STR, OPT),
            ("value", 4, BYTES, OPT), ("changed_value", 5, BYTES, OPT),
        ],
        "Event": [
            ("schema_name", 1, STR, OPT), ("table_name", 2, STR, OPT),
            ("tp", 3, enum("pb_binlog.EventType"), OPT), ("row", 4, BYTES, REP),
        ],
        "DMLData": [("events", 1, msg("pb_binlog.Event"), REP)],
        "Binlog": [
            ("tp", 1, enum("pb_binlog.BinlogType"), OPT), ("commit_ts", 2, I64, OPT),
            ("dml_data", 3, msg("pb_binlog.DMLData"), OPT), ("ddl_query", 4, BYTES, OPT),
        ],
    }, {
        "EventType": {"Insert": 0, "Update": 1, "Delete": 2},
        "BinlogType": {"DML": 0, "DDL": 1},
    }),
    "secondary_binlog.proto": (secondary_binlog_pb2, "slave.binlog", True, {
        "Column": [
            ("is_null", 1, BOOL, OPT), ("int64_value", 2, I64, OPT),
            ("uint64_value", 3, U64, OPT), ("double_value", 4, DBL, OPT),
            ("bytes_value", 5, BYTES, OPT), ("string_value", 6, STR, OPT),
        ],
        "ColumnInfo": [
            ("name", 1, STR, OPT), ("mysql_type", 2, STR, OPT), ("is_primary_key", 3, BOOL, OPT),
            ("flen", 4, I32, OPT), ("decimal", 5, I32, OPT),
        ],
        "Row": [("columns", 1, msg("slave.binlog.Column"), REP)],
        "Table": [
            ("schema_name", 1, STR, OPT), ("table_name", 2, STR, OPT),
            ("column_info", 3, msg("slave.binlog.ColumnInfo"), REP),
            ("mutations", 4, msg("slave.binlog.TableMutation"), REP),
            ("unique_keys", 5, msg("slave.binlog.Key"), REP),
        ],
        "Key": [("name", 1, STR, OPT), ("column_names", 2, STR, REP)],
        "TableMutation": [
            ("type", 1, enum("slave.binlog.MutationType"), REQ),
            ("row", 2, msg("slave.binlog.Row"), REQ),
            ("change_row", 3, msg("slave.binlog.Row"), OPT),
        ],
        "DMLData": [("tables", 1, msg("slave.binlog.Table"), REP)],
        "DDLData": [
            ("schema_name", 1, STR, OPT), ("table_name", 2, STR, OPT), ("ddl_query", 3, BYTES, OPT),
        ],
        "Binlog": [
            ("type", 1, enum("slave.binlog.BinlogType"), OPT), ("commit_ts", 2, I64, OPT),
            ("dml_data", 3, msg("slave.binlog.DMLData"), OPT),
            ("ddl_data", 4, msg("slave.binlog.DDLData"), OPT), ("time_zone", 5, STR, OPT),
        ],
    }, {
        "MutationType": {"Insert": 0, "Update": 1, "Delete": 2},
        "BinlogType": {"DML": 0, "DDL": 1},
    }),
}

# service: (module, {method: (input, output, server_streaming)})
SERVICES = {
    "binlog.Pump": (pump_pb2, {
        "WriteBinlog": ("binlog.WriteBinlogReq", "binlog.WriteBinlogResp", False),
        "PullBinlogs": ("binlog.PullBinlogReq", "binlog.PullBinlogResp", True),
    }),
    "binlog.Cistern": (cistern_pb2, {
        "Notify": ("binlog.NotifyReq", "binlog.NotifyResp", False),
        "DumpBinlog": ("binlog.DumpBinlogReq", "binlog.DumpBinlogResp", True),
        "DumpDDLJobs": ("binlog.DumpDDLJobsReq", "binlog.DumpDDLJobsResp", False),
    }),
}


def _label(field) -> str:
    return REP if field.is_repeated else REQ if field.is_required else OPT


def _describe(field) -> tuple:
    if field.type == FD.TYPE_ENUM:
        kind = enum(field.enum_type.full_name)
    elif field.type == FD.TYPE_MESSAGE:
        kind = msg(field.message_type.full_name)
    else:
        kind = field.type
    return (field.name, field.number, kind, _label(field))


# -- generated code is current -----------------------------------------------


def test_generated_code_matches_a_fresh_generation(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_proto.py"),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"gen_proto.py failed:\n{proc.stdout}\n{proc.stderr}"
    fresh = sorted(p.name for g in GENERATED_GLOBS for p in tmp_path.glob(g))
    committed = sorted(p.name for g in GENERATED_GLOBS for p in PROTO_DIR.glob(g))
    # _pb2.py and .pyi per proto, _grpc for pump, cistern and pump_stream
    assert len(fresh) == 6 + 6 + 3
    assert fresh == committed, f"generated files differ in name: {fresh} vs {committed}"
    problems = []
    for name in fresh:
        if not filecmp.cmp(tmp_path / name, PROTO_DIR / name, shallow=False):
            diff = list(difflib.unified_diff(
                (PROTO_DIR / name).read_text().splitlines(), (tmp_path / name).read_text().splitlines(),
                f"committed/{name}", f"regenerated/{name}", lineterm="", n=1))
            problems.append("\n".join(diff[:20] + ([f"... {len(diff) - 20} more lines"]
                                                   if len(diff) > 20 else [])))
    assert not problems, ("committed generated code is stale; run "
                          "`.venv/bin/python scripts/gen_proto.py`:\n" + "\n\n".join(problems))


# -- descriptors match the reference tables ------------------------------------


@pytest.mark.parametrize("proto", SPEC)
def test_package_and_syntax(proto):
    module, package, proto2, messages, _ = SPEC[proto]
    assert module.DESCRIPTOR.name == proto
    assert module.DESCRIPTOR.package == package
    # proto2 scalars have presence; proto3 scalars (no `optional`) do not.
    some_scalar = next(f for fields in messages.values() for f in fields
                       if not isinstance(f[2], tuple) and f[3] == OPT)
    descriptor = module.DESCRIPTOR.message_types_by_name[
        next(m for m, fs in messages.items() if some_scalar in fs)]
    assert descriptor.fields_by_name[some_scalar[0]].has_presence is proto2


@pytest.mark.parametrize("proto, message", [(p, m) for p, spec in SPEC.items() for m in spec[3]])
def test_message_fields(proto, message):
    module, package, _, messages, _ = SPEC[proto]
    descriptor = module.DESCRIPTOR.message_types_by_name.get(message)
    assert descriptor is not None, f"{proto} lacks message {message}"
    assert descriptor.full_name == f"{package}.{message}"
    actual = [_describe(f) for f in sorted(descriptor.fields, key=lambda f: f.number)]
    assert actual == messages[message]


@pytest.mark.parametrize("proto", SPEC)
def test_no_unexpected_messages(proto):
    module, _, _, messages, enums = SPEC[proto]
    assert set(module.DESCRIPTOR.message_types_by_name) == set(messages)
    assert set(module.DESCRIPTOR.enum_types_by_name) == set(enums)


@pytest.mark.parametrize("proto, name", [(p, e) for p, spec in SPEC.items() for e in spec[4]])
def test_enum_values(proto, name):
    module, _, _, _, enums = SPEC[proto]
    values = module.DESCRIPTOR.enum_types_by_name[name].values
    assert {v.name: v.number for v in values} == enums[name]


def test_binlog_sequence_is_not_packed():
    field = binlog_pb2.DESCRIPTOR.message_types_by_name["TableMutation"].fields_by_name["sequence"]
    assert not field.is_packed


def test_always_written_binlog_fields_have_presence():
    binlog_msg = binlog_pb2.DESCRIPTOR.message_types_by_name["Binlog"]
    for name in ("tp", "start_ts", "commit_ts", "ddl_job_id", "ddl_schema_state"):
        assert binlog_msg.fields_by_name[name].has_presence, name


@pytest.mark.parametrize("service", SERVICES)
def test_services(service):
    module, methods = SERVICES[service]
    package, name = service.rsplit(".", 1)
    descriptor = module.DESCRIPTOR.services_by_name[name]
    assert descriptor.full_name == service
    actual = {m.name: (m.input_type.full_name, m.output_type.full_name, m.server_streaming)
              for m in descriptor.methods}
    assert actual == methods
    assert not any(m.client_streaming for m in descriptor.methods)


def test_grpc_method_paths():
    from tidb_binlog.proto import pump_pb2_grpc

    class Recorder:
        def __init__(self):
            self.paths = []

        def unary_unary(self, path, **kw):
            self.paths.append(path)

        unary_stream = stream_unary = stream_stream = unary_unary

    channel = Recorder()
    pump_pb2_grpc.PumpStub(channel)
    assert sorted(channel.paths) == ["/binlog.Pump/PullBinlogs", "/binlog.Pump/WriteBinlog"]


def test_pump_stream_service():
    """Our own client-streaming write (pump_stream.proto), not part of TiDB's protocol:
    its method path, and chunk fields whose hand-written encoding (pump_client.transport,
    pump.stream_write) must keep these numbers and types."""
    from tidb_binlog.proto import pump_stream_pb2, pump_stream_pb2_grpc

    service = pump_stream_pb2.DESCRIPTOR.services_by_name["PumpStream"]
    method = service.methods_by_name["WriteBinlogChunks"]
    assert (method.client_streaming, method.server_streaming) == (True, False)
    chunk = pump_stream_pb2.DESCRIPTOR.message_types_by_name["BinlogChunk"]
    assert [_describe(f) for f in sorted(chunk.fields, key=lambda f: f.number)] == [
        ("clusterID", 1, U64, OPT), ("total_size", 2, U64, OPT),
        ("crc32c", 3, FD.TYPE_UINT32, OPT), ("data", 4, BYTES, OPT)]
    resp = pump_stream_pb2.DESCRIPTOR.message_types_by_name["WriteBinlogChunksResp"]
    assert [_describe(f) for f in resp.fields] == [("errmsg", 1, STR, OPT)]

    class Recorder:
        def __init__(self):
            self.paths = []

        def stream_unary(self, path, **kw):
            self.paths.append(path)

    channel = Recorder()
    pump_stream_pb2_grpc.PumpStreamStub(channel)
    assert channel.paths == ["/binlog_stream.PumpStream/WriteBinlogChunks"]
