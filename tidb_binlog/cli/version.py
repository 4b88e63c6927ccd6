"""``tidb-binlog version``: print the version and the versions of the parts we stand on."""

from __future__ import annotations

from importlib import metadata


def register(sub) -> None:
    p = sub.add_parser("version", help="print versions of tidb-binlog-ray and its dependencies")
    p.set_defaults(func=run)


def run(args) -> int:
    print(f"tidb-binlog-ray {metadata.version('tidb-binlog-ray')}")
    for dist in ("ray", "raydp", "pyspark", "grpcio", "protobuf", "plyvel", "pymysql"):
        try:
            print(f"  {dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            print(f"  {dist} (not installed)")
    return 0
