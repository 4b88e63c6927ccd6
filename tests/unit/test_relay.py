"""The relay log's pure rules: records, write-before-apply, GC, and the recovery replay.

Real files in ``tmp_path`` (the binlog file format underneath is tested in
test_binlogfile.py); the workers and the downstream are fakes: recovery against a real
MariaDB after a real kill -9 is tests/ray/test_relay_recovery.py.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from tidb_binlog.binlogfile import walk
from tidb_binlog.drainer.apply.dml import DDL, DML, DMLType, TableSchema, Txn
from tidb_binlog.drainer.checkpoint.checkpoint import Checkpoint
from tidb_binlog.drainer.pipeline.settings import TaskSettings
from tidb_binlog.drainer.relay import RelayLog, record_schema_version, recover, relay_records
from tidb_binlog.drainer.relay.recover import needs_recovery
from tidb_binlog.drainer.sinks.mysql.coordinator import Coordinator
from tidb_binlog.errors import CodecError, ConfigError, CorruptRecord
from tidb_binlog.reparo.decode import binlog_to_txn, decode_binlog, parse_binlog

T = TableSchema.build("db", "t", ["id", "v"], ["id"])


def ins(ts: int, *ids: int) -> Txn:
    return Txn(ts, tuple(DML("db", "t", DMLType.INSERT, {"id": i, "v": f"v{i}"}, None, T)
                         for i in ids))


class Store:
    def __init__(self, cp: Checkpoint | None = None):
        self.saved = [cp] if cp else []

    def load(self):
        return self.saved[-1] if self.saved else None

    def save(self, cp):
        self.saved.append(cp)

    def close(self):
        pass


class Applier:
    def __init__(self):
        self.txns: list[Txn] = []
        self.rows = self.ddls = 0
        self.finished = False

    def add(self, txn):
        self.txns.append(txn)
        self.rows += len(txn.dmls)
        self.ddls += txn.ddl is not None

    def finish(self):
        self.finished = True


# -- records ---------------------------------------------------------------------------------
def test_a_record_reads_back_as_the_same_rows_through_reparos_decoder(tmp_path):
    values = {"id": 7, "big": (1 << 64) - 1, "neg": -3, "f": 1.5, "s": "héllo", "b": b"\x00\xff",
              "n": None, "d": Decimal("12.50"), "flag": True}
    old = dict(values, s="old", n=1)
    txn = Txn(40, (DML("db", "t", DMLType.INSERT, values, None),
                   DML("db", "t", DMLType.UPDATE, values, old),
                   DML("db", "t", DMLType.DELETE, {"id": 7}, None)))
    relay = RelayLog(tmp_path)
    relay.append([(40, txn, 9)])
    relay.close()
    [(_, payload)] = list(walk(tmp_path))
    b = parse_binlog(payload)
    assert record_schema_version(b) == 9
    back = binlog_to_txn(b)
    expected = dict(values, d="12.50", flag=1)
    assert [d.tp for d in back.dmls] == [DMLType.INSERT, DMLType.UPDATE, DMLType.DELETE]
    assert back.dmls[0].values == expected
    assert back.dmls[1].values == expected
    assert back.dmls[1].old_values == dict(expected, s="old", n=1)
    assert back.dmls[2].values == {"id": 7}


def test_a_ddl_record_is_the_file_sinks_and_a_value_we_cannot_store_is_named(tmp_path):
    relay = RelayLog(tmp_path)
    relay.append([(50, Txn(50, ddl=DDL("db", "t", "ALTER TABLE t ADD c INT", 50)), 3)])
    [(_, payload)] = list(walk(tmp_path))
    back = decode_binlog(payload)
    assert back.ddl.sql == "ALTER TABLE t ADD c INT" and back.ddl.database == "db"
    bad = Txn(51, (DML("db", "t", DMLType.INSERT, {"id": 1, "v": object()}, None),))
    with pytest.raises(CodecError, match=r"commit_ts 51, column 'v'"):
        relay.append([(51, bad, 3)])
    relay.close()


# -- the writer ----------------------------------------------------------------------------------
def test_fakes_and_replayed_transactions_are_not_written_twice(tmp_path):
    relay = RelayLog(tmp_path)
    assert relay.append([(10, ins(10, 1), 1), (11, None, 1), (12, ins(12, 2), 1)]) == 2
    relay.close()
    relay = RelayLog(tmp_path)  # a restarted coordinator: the merger replays from 10
    assert relay.last_ts == 12
    assert relay.append([(12, ins(12, 2), 1), (13, ins(13, 3), 1)]) == 1
    relay.close()
    assert [ts for ts, _ in relay_records(tmp_path, 0)] == [10, 12, 13]
    assert [ts for ts, _ in relay_records(tmp_path, 10)] == [12, 13]


def test_gc_removes_files_wholly_below_the_saved_checkpoint_never_the_current_one(tmp_path):
    relay = RelayLog(tmp_path, max_file_size_bytes=1)  # one record per file
    for ts in (10, 20, 30):
        relay.append([(ts, ins(ts, ts), 1)])
    assert len(relay.files()) == 4  # the last write rotated into an empty current file
    assert relay.gc(19) == ["binlog-0000000000000000-" + relay.files()[0].split("-")[2]]
    assert [ts for ts, _ in relay_records(tmp_path, 0)] == [20, 30]
    assert relay.gc(30) and [ts for ts, _ in relay_records(tmp_path, 0)] == []
    assert len(relay.files()) == 1  # the file being written stays
    relay.close()
    relay = RelayLog(tmp_path, max_file_size_bytes=1 << 20)
    relay.append([(40, ins(40, 4), 1)])
    assert relay.gc(1000) == []  # the only file is the current one
    relay.close()


def test_gc_learns_the_last_commit_ts_of_existing_files_when_opened(tmp_path):
    relay = RelayLog(tmp_path, max_file_size_bytes=1)
    for ts in (10, 20):
        relay.append([(ts, ins(ts, ts), 1)])
    relay.close()
    relay = RelayLog(tmp_path, max_file_size_bytes=1)
    assert len(relay.gc(10)) == 1
    assert [ts for ts, _ in relay_records(tmp_path, 0)] == [20]
    relay.close()


# -- in the MySQL sink ---------------------------------------------------------------------------
class Workers:
    """Every call is recorded with what the relay log held at that moment."""

    def __init__(self, relay_dir):
        self.relay_dir = relay_dir
        self.seen: list[tuple[list[int], list[int]]] = []

    def __len__(self):
        return 2

    def begin(self, epoch):
        pass

    def execute(self, worker, parts, epoch):
        relayed = [ts for ts, _ in relay_records(self.relay_dir, 0)]
        self.seen.append(([p[0] for p in parts], relayed))
        return len(self.seen)

    def execute_ddl(self, worker, ddl, epoch):
        pass

    def done(self, handles, block):
        return list(handles)

    def result(self, handle):
        return None


def test_the_sink_relays_a_batch_before_any_worker_sees_it_and_gcs_on_saves(tmp_path):
    settings = TaskSettings(cluster_id=1, worker_count=2, txn_batch=1, initial_commit_ts=0,
                            relay_dir=str(tmp_path), relay_max_file_size=1, save_interval_s=0)
    assert not settings.routed
    workers, store = Workers(tmp_path), Store()
    coord = Coordinator(settings, workers, store,
                        open_relay=lambda: RelayLog(tmp_path, max_file_size_bytes=1))
    coord.reset()
    coord.apply(0, [(10, ins(10, 1, 2), 1), (11, None, 1), (12, ins(12, 3), 1)])
    for parts, relayed in workers.seen:
        assert set(parts) <= set(relayed)
    assert store.saved[-1].commit_ts == 12
    # saved at 12: every file whose records are at or below it is gone
    assert list(relay_records(tmp_path, 0)) == []
    assert coord.status().extra["relay_last_ts"] == 12
    with pytest.raises(ConfigError, match="relay log"):
        coord.apply_routed(1, [], [None, None])
    assert coord.close().consistent
    RelayLog(tmp_path).close()  # close() released the directory's lock


# -- recovery ------------------------------------------------------------------------------------
def test_recovery_applies_the_records_above_the_checkpoint_and_saves_it_consistent(tmp_path):
    relay = RelayLog(tmp_path)
    relay.append([(10, ins(10, 1), 1), (20, ins(20, 2, 3), 1),
                  (30, Txn(30, ddl=DDL("db", "t", "ALTER TABLE t ADD c INT", 30)), 2),
                  (40, ins(40, 4), 2)])
    relay.close()
    store, applier = Store(Checkpoint(10, consistent=False, schema_version=1)), Applier()
    assert needs_recovery(store.load())
    summary = recover(tmp_path, store, applier)
    assert [t.commit_ts for t in applier.txns] == [20, 30, 40] and applier.finished
    assert store.saved[-1] == Checkpoint(40, consistent=True, schema_version=2)
    assert (summary.records, summary.rows, summary.ddls) == (3, 3, 1)
    assert "moved from 10 to 40" in summary.describe()
    assert not needs_recovery(store.load())


def test_recovery_with_nothing_above_the_checkpoint_only_marks_it_consistent(tmp_path):
    RelayLog(tmp_path).close()
    store = Store(Checkpoint(50, consistent=False, schema_version=4))
    summary = recover(tmp_path, store, Applier())
    assert store.saved[-1] == Checkpoint(50, consistent=True, schema_version=4)
    assert summary.records == 0 and "nothing" in summary.describe()


def test_recovery_refuses_a_missing_directory_and_a_damaged_middle_record(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        recover(tmp_path / "nope", Store(Checkpoint(1)), Applier())
    relay = RelayLog(tmp_path)
    relay.append([(10, ins(10, 1), 1)])
    relay.append([(20, ins(20, 2), 1)])
    relay.close()
    [seg] = [p for p in tmp_path.glob("binlog-*")]
    data = bytearray(seg.read_bytes())
    data[14] ^= 0xFF  # inside the first record's payload: its CRC fails
    seg.write_bytes(bytes(data))
    store = Store(Checkpoint(5))
    with pytest.raises(CorruptRecord):
        recover(tmp_path, store, Applier())
    assert len(store.saved) == 1  # nothing saved


def test_config_relay_keys_reach_the_settings_and_a_file_sink_refuses_them(tmp_path):
    from tidb_binlog.config import load_drainer_config

    cfg = load_drainer_config(None, {"syncer.relay.log-dir": "relay",
                                     "syncer.relay.max-file-size": "1 MiB"})
    settings = TaskSettings.from_config(cfg, upstream_meta={})
    assert settings.relay_dir.endswith("/relay") and settings.relay_dir.startswith("/")
    assert settings.relay_max_file_size == 1 << 20 and not settings.routed
    with pytest.raises(ConfigError, match=r"syncer.relay.log-dir.*mysql or tidb"):
        load_drainer_config(None, {"syncer.db-type": "file", "syncer.relay.log-dir": "relay"})


def test_a_record_is_byte_for_byte_what_protobuf_writes_for_the_same_messages():
    from tidb_binlog.codec import Datum, encode_value
    from tidb_binlog.drainer.relay.record import txn_record
    from tidb_binlog.proto import pb_binlog_pb2 as pb

    txn = Txn(1 << 60, (DML("db", "t", DMLType.UPDATE, {"id": 1, "v": "new"}, {"id": 1, "v": None}),
                        DML("db", "u" * 200, DMLType.DELETE, {"id": -5}, None)))

    def col(name, tp, mysql_type, value, changed=None):
        c = pb.column(name=name, tp=bytes((tp,)), mysql_type=mysql_type,
                      value=encode_value([value]))
        if changed is not None:
            c.changed_value = encode_value([changed])
        return c.SerializeToString()

    expected = pb.Binlog(tp=pb.DML, commit_ts=1 << 60, dml_data=pb.DMLData(events=[
        pb.Event(schema_name="db", table_name="t", tp=pb.Update, row=[
            col("id", 8, "bigint", Datum.int64(1), Datum.int64(1)),
            col("v", 15, "varchar", Datum.null(), Datum.string("new"))]),
        pb.Event(schema_name="db", table_name="u" * 200, tp=pb.Delete, row=[
            col("id", 8, "bigint", Datum.int64(-5))])])).SerializeToString()
    assert txn_record(1 << 60, txn, 300) == expected + b"\x78\xac\x02"
