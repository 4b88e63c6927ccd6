"""The pump's gRPC stack on uvloop, which the pump picks when importable (new_event_loop)."""

from __future__ import annotations

import importlib.util

import pytest

from tidb_binlog.pump.grpc_server import new_event_loop

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


@pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop not installed")
def test_grpc_aio_server_runs_on_uvloop():
    """A grpc.aio server and client round trip on uvloop (127.0.0.1, port 0)."""
    import grpc

    from tidb_binlog.proto import pump_pb2

    loop = new_event_loop("uvloop")

    async def main():
        async def write(request, context):
            return pump_pb2.WriteBinlogResp(errmsg=f"got {request.clusterID}")

        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("binlog.Pump", {
            "WriteBinlog": grpc.unary_unary_rpc_method_handler(
                write, request_deserializer=pump_pb2.WriteBinlogReq.FromString,
                response_serializer=pump_pb2.WriteBinlogResp.SerializeToString)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
                call = ch.unary_unary("/binlog.Pump/WriteBinlog",
                                      request_serializer=pump_pb2.WriteBinlogReq.SerializeToString,
                                      response_deserializer=pump_pb2.WriteBinlogResp.FromString)
                return (await call(pump_pb2.WriteBinlogReq(clusterID=7))).errmsg
        finally:
            await server.stop(None)

    try:
        assert loop.run_until_complete(main()) == "got 7"
    finally:
        loop.close()
