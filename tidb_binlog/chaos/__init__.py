"""Pure logic of ``tidb-binlog chaos`` (no Ray, no servers): the seeded fault schedule
(:mod:`.schedule`) and the end-of-run checks (:mod:`.verdict`). The runner that
injects the faults into a live cluster is ``cluster/chaos.py``."""

from tidb_binlog.chaos.schedule import (
                                        ACTOR_KINDS,
                                        FAULT_KINDS,
                                        Fault,
                                        make_schedule,
                                        parse_kinds,
                                        schedule_from_json,
                                        schedule_to_json,
)
from tidb_binlog.chaos.verdict import (
                                        RecoveryRecord,
                                        Verdict,
                                        audit_duplicates,
                                        audit_trigger_sql,
                                        bank_violation,
                                        percentile,
                                        recovery_table,
                                        result_line,
)

__all__ = ["ACTOR_KINDS", "FAULT_KINDS", "Fault", "make_schedule", "parse_kinds",
           "schedule_from_json", "schedule_to_json", "RecoveryRecord", "Verdict",
           "audit_duplicates", "audit_trigger_sql", "bank_violation", "percentile",
           "recovery_table", "result_line"]
