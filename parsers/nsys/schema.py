"""The tables of an Nsight Systems export traceview reads, and the enumerations nsys writes (the
built-in copies used when an export lacks its ENUM tables).
"""

from __future__ import annotations

import logging
import re

from traceview.model import EVENT_SCHEMA


#: says (at DEBUG) when a table is read with sqlite3 because the ADBC driver could not read it
log = logging.getLogger(__name__)

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")
EXPORT_HINT = "export it first: nsys export --type sqlite --output X.sqlite X.nsys-rep"

KERNEL_T = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY_T = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_T = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC_T = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME_T = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX_T = "NVTX_EVENTS"
OSRT_T = "OSRT_API"
EVENT_TABLES = (KERNEL_T, MEMCPY_T, MEMSET_T, SYNC_T, RUNTIME_T, NVTX_T, OSRT_T)
#: A file is an Nsight export only if it has at least one of these.
CORE_TABLES = (KERNEL_T, RUNTIME_T, NVTX_T)

#: Tables that describe rather than record events: never counted as unmapped.
INFO_PREFIXES = ("ENUM_", "TARGET_INFO_", "META_DATA_", "ANALYSIS_", "NVTX_PAYLOAD_", "sqlite_")
INFO_TABLES = {"StringIds", "ThreadNames", "PROCESSES", "ProcessStreams", "EXPORT_META_DATA",
                "CUDA_CALLCHAINS", "OSRT_CALLCHAINS", "SAMPLING_CALLCHAINS", "UnwindMethodType"}


MEMCPY_KINDS_BUILTIN = {
    0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "UVM HtoD", 12: "UVM DtoH", 13: "UVM DtoD",
}
SYNC_NAMES_BUILTIN = {0: "Unknown Sync", 1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync",
                      4: "Context Sync"}


EVENT_CLASS_BUILTIN = {0: "cuda_runtime", 1: "cuda_driver"}
#: NVTX event types (ENUM_NSYS_EVENT_TYPE) when the export has no enum table.
NVTX_RANGE_TYPES_BUILTIN = (59, 60, 70, 71)
NVTX_MARK_TYPES_BUILTIN = (34, 65)
NVTX_DOMAIN_CREATE_BUILTIN = 75

RUNTIME_VERSION_SUFFIX = r"_v\d{4,}$"
#: What ``torch.autograd.profiler.emit_nvtx`` appends to an op's NVTX range name: sequence number,
#: op id, input shapes (``record_shapes``), input op ids. Removed so ranges of one op share a name.
EMIT_NVTX_SUFFIX = r", (?:seq = -?\d+|op_id = \d+|sizes = \[|input_op_ids = \[).*$"
NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")
NCCL_COLLECTIVES = {
    "allreduce": "allreduce", "allgather": "allgather", "reducescatter": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "sendrecv": "sendrecv", "send": "send",
    "recv": "recv", "alltoall": "all_to_all",
}
NCCL_DTYPES = {
    "f32": "Float", "float": "Float", "f16": "Half", "half": "Half", "bf16": "BFloat16",
    "f64": "Double", "double": "Double", "i8": "Char", "int8_t": "Char", "u8": "Byte",
    "uint8_t": "Byte", "i32": "Int", "int32_t": "Int", "u32": "UInt32", "uint32_t": "UInt32",
    "i64": "Long", "int64_t": "Long", "u64": "UInt64", "uint64_t": "UInt64",
    "f8e4m3": "Float8_e4m3fn", "f8e5m2": "Float8_e5m2",
}
BATCH = 1 << 18
#: The message dtype column (``msg_dtype``; ``dtype`` in the first model version).
DTYPE_COLUMN = "msg_dtype" if "msg_dtype" in EVENT_SCHEMA.names else "dtype"
