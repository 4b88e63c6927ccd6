"""Prometheus metrics of the pump client (process-wide, registered once).

- ``binlog_pump_client_write_total{type,result}``: binlogs written (type
  prewrite|commit|rollback; result ok|error|given_up).
- ``binlog_pump_client_write_duration_seconds{type}``: one write_binlog call,
  retries included.
- ``binlog_pump_client_rpc_errors_total{node}``: failed WriteBinlog attempts.
- ``binlog_pump_client_pump_unavailable_total{node}``: moves to the unavailable list.
- ``binlog_pump_client_probe_total{result}``: probes of unavailable pumps (ok|error).
- ``binlog_pump_client_commit_given_up_total{reason}``: Commit/Rollback binlogs
  dropped (reason timeout|closed|rejected|no_prewrite); the pump then resolves
  the transaction itself after ``max-txn-timeout``.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

__all__ = [
    "WRITE_TOTAL",
    "WRITE_DURATION",
    "RPC_ERRORS",
    "PUMP_UNAVAILABLE",
    "PROBE_TOTAL",
    "COMMIT_GIVEN_UP",
    "KINDS",
    "WRITE_OK",
    "WRITE_SECONDS",
]

WRITE_TOTAL = Counter("binlog_pump_client_write_total",
                      "Binlogs written by the pump client", ["type", "result"])
WRITE_DURATION = Histogram("binlog_pump_client_write_duration_seconds",
                           "Duration of one write_binlog call, retries included", ["type"],
                           buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                    1, 2.5, 5, 15, 60, 600))
RPC_ERRORS = Counter("binlog_pump_client_rpc_errors_total",
                     "Failed WriteBinlog attempts per pump", ["node"])
PUMP_UNAVAILABLE = Counter("binlog_pump_client_pump_unavailable_total",
                           "Times a pump was moved to the unavailable list", ["node"])
PROBE_TOTAL = Counter("binlog_pump_client_probe_total",
                      "Probes of unavailable pumps", ["result"])
COMMIT_GIVEN_UP = Counter("binlog_pump_client_commit_given_up_total",
                          "Commit/Rollback binlogs the client gave up on", ["reason"])

# Children bound once: a ``labels()`` lookup takes a lock and a dict probe per call,
# which the per-binlog path does not need to pay.
KINDS = ("prewrite", "commit", "rollback", "other")
WRITE_OK = {kind: WRITE_TOTAL.labels(kind, "ok") for kind in KINDS}
WRITE_SECONDS = {kind: WRITE_DURATION.labels(kind) for kind in KINDS}
