from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class BinlogChunk(_message.Message):
    __slots__ = ("clusterID", "total_size", "crc32c", "data")
    CLUSTERID_FIELD_NUMBER: _ClassVar[int]
    TOTAL_SIZE_FIELD_NUMBER: _ClassVar[int]
    CRC32C_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    clusterID: int
    total_size: int
    crc32c: int
    data: bytes
    def __init__(self, clusterID: _Optional[int] = ..., total_size: _Optional[int] = ..., crc32c: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class WriteBinlogChunksResp(_message.Message):
    __slots__ = ("errmsg",)
    ERRMSG_FIELD_NUMBER: _ClassVar[int]
    errmsg: str
    def __init__(self, errmsg: _Optional[str] = ...) -> None: ...
