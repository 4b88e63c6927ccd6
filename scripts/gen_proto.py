#!/usr/bin/env python3
"""Regenerate the Python code for tidb_binlog/proto/*.proto with grpcio-tools.

Usage: python scripts/gen_proto.py [--out DIR]

The generated modules are committed; tests/unit/test_proto.py regenerates them
into a temporary directory and fails when they differ from the committed ones.
grpcio-tools is pinned in pyproject.toml so the output is reproducible.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent.parent / "tidb_binlog" / "proto"
PROTOS = ["binlog.proto", "pump.proto", "cistern.proto", "pb_binlog.proto", "secondary_binlog.proto",
          "pump_stream.proto"]
GRPC_PROTOS = ["pump.proto", "cistern.proto", "pump_stream.proto"]


def generate(out_dir: Path) -> None:
    from grpc_tools import protoc

    out_dir.mkdir(parents=True, exist_ok=True)
    for proto in PROTOS:
        args = ["protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}", f"--pyi_out={out_dir}"]
        if proto in GRPC_PROTOS:
            args.append(f"--grpc_python_out={out_dir}")
        args.append(str(PROTO_DIR / proto))
        if protoc.main(args) != 0:
            raise SystemExit(f"protoc failed on {proto}")
    # grpc stubs import their messages as top-level modules; make them package-relative.
    for stub in out_dir.glob("*_pb2_grpc.py"):
        text = stub.read_text()
        text = re.sub(r"^import (\w+_pb2) as ", r"from . import \1 as ", text, flags=re.M)
        stub.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=PROTO_DIR, help="output directory")
    args = parser.parse_args(argv)
    generate(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
