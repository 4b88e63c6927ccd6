"""TiDB's DDL job (``model.Job``) and its ``binlog`` field (``model.HistoryInfo``).

A finished DDL job is what the drainer fetches by ``ddl_job_id`` to learn the schema
after the DDL: ``binlog.SchemaVersion`` orders jobs, ``binlog.TableInfo`` /
``binlog.DBInfo`` / ``binlog.MultipleTableInfos`` carry the result. HistoryInfo has no
json tags in Go, so its keys are the Go field names (``SchemaVersion``, ``DBInfo``,
``TableInfo``, ``FinishedTS``, ``MultipleTableInfos``).

Drainer rule (``skipJob``): a job is applied only when its state is DONE or SYNCED
and its table id is at most ``MAX_GLOBAL_ID``; a job whose ``SchemaVersion`` is 0 is
a failed DDL.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tidb_binlog.model._json import GoStruct
from tidb_binlog.model.consts import MAX_GLOBAL_ID, JobState, SchemaState
from tidb_binlog.model.schema import DBInfo, TableInfo

__all__ = ["HistoryInfo", "Job", "JOB_VERSION"]

JOB_VERSION = 1  # model.JobVersion1 (raw_args is a JSON array)


@dataclass
class HistoryInfo(GoStruct):
    schema_version: int = 0
    db_info: DBInfo | None = None
    table_info: TableInfo | None = None
    finished_ts: int = 0
    multiple_table_infos: list[TableInfo] = field(default_factory=list)
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("SchemaVersion", "schema_version", None), ("DBInfo", "db_info", DBInfo),
             ("TableInfo", "table_info", TableInfo), ("FinishedTS", "finished_ts", None),
             ("MultipleTableInfos", "multiple_table_infos", [TableInfo]))


@dataclass
class Job(GoStruct):
    id: int
    type: int
    schema_id: int = 0
    table_id: int = 0
    schema_name: str = ""
    table_name: str = ""
    state: int = JobState.NONE
    err: Any = None
    err_count: int = 0
    row_count: int = 0
    raw_args: Any = None
    schema_state: int = SchemaState.NONE
    snapshot_ver: int = 0
    real_start_ts: int = 0
    start_ts: int = 0
    dependency_id: int = 0
    query: str = ""
    binlog: HistoryInfo = field(default_factory=HistoryInfo)
    version: int = JOB_VERSION
    reorg_meta: Any = None
    multi_schema_info: Any = None
    priority: int = 0
    seq_num: int = 0
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    _JSON = (("id", "id", None), ("type", "type", None), ("schema_id", "schema_id", None),
             ("table_id", "table_id", None), ("schema_name", "schema_name", None),
             ("table_name", "table_name", None), ("state", "state", None), ("err", "err", None),
             ("err_count", "err_count", None), ("row_count", "row_count", None),
             ("raw_args", "raw_args", None), ("schema_state", "schema_state", None),
             ("snapshot_ver", "snapshot_ver", None), ("real_start_ts", "real_start_ts", None),
             ("start_ts", "start_ts", None), ("dependency_id", "dependency_id", None),
             ("query", "query", None), ("binlog", "binlog", HistoryInfo),
             ("version", "version", None), ("reorg_meta", "reorg_meta", None),
             ("multi_schema_info", "multi_schema_info", None), ("priority", "priority", None),
             ("seq_num", "seq_num", None))

    def to_json(self) -> str:
        return json.dumps(self.to_obj(), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Job:
        job = cls.from_obj(json.loads(text))
        if job.binlog is None:
            job.binlog = HistoryInfo()
        return job

    @property
    def schema_version(self) -> int:
        return self.binlog.schema_version

    def is_done_or_synced(self) -> bool:
        return self.state in (JobState.DONE, JobState.SYNCED)

    def drainer_skips(self) -> bool:
        """TiDB Binlog's ``skipJob``: not finished, or on a DDL system table."""
        return not self.is_done_or_synced() or self.table_id > MAX_GLOBAL_ID
