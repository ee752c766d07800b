"""The optional event columns a trace lacks (message sizes, process groups, op inputs ... in most
Kineto files) are all-null columns backed by one shared zero buffer (``model.null_array``), equal to
what ``pa.nulls`` makes, instead of a buffer of zeros written per column."""

from __future__ import annotations

import pyarrow as pa
from conftest import SAMPLE_TRACES

import traceview
from traceview.model import EVENT_SCHEMA, make_events_table, null_array


def _data_address(column: pa.ChunkedArray) -> int:
    chunk = column.chunk(0)
    indices = chunk.indices if isinstance(chunk, pa.DictionaryArray) else chunk
    return indices.buffers()[1].address


def test_missing_optional_columns_are_nulls_sharing_one_buffer() -> None:
    table = make_events_table({}, 1000)
    optional = [f for f in EVENT_SCHEMA if f.nullable]
    assert optional
    for field in optional:
        column = table.column(field.name)
        column.validate(full=True)
        assert column.null_count == 1000 and column.type == field.type
        if pa.types.is_dictionary(field.type):
            expected = pa.DictionaryArray.from_arrays(pa.nulls(1000, field.type.index_type), pa.array([], pa.string()))
        else:
            expected = pa.nulls(1000, field.type)
        assert column.chunk(0).equals(expected), field.name
        assert column.to_pylist() == [None] * 1000
    assert len({_data_address(table.column(f.name)) for f in optional}) == 1


def test_null_array_of_each_kind_equals_pa_nulls() -> None:
    for data_type in (pa.int32(), pa.int64(), pa.float64(), pa.int8()):
        assert null_array(data_type, 77).equals(pa.nulls(77, data_type))
    assert null_array(pa.int64(), 0).equals(pa.nulls(0, pa.int64()))
    assert null_array(pa.string(), 5).equals(pa.nulls(5, pa.string()))  # no fixed width: pa.nulls itself


def test_a_parsed_kineto_trace_shares_the_buffer_of_its_empty_columns() -> None:
    trace = traceview.load(SAMPLE_TRACES / "torch_cpu_mlp.json.gz", use_cache=False, jobs=1)
    empty = [f.name for f in EVENT_SCHEMA if f.nullable and trace.events.column(f.name).null_count == trace.num_events]
    assert len(empty) >= 2, "the sample has no empty optional column: the test would check nothing"
    assert len({_data_address(trace.events.column(name)) for name in empty}) == 1


def test_files_concatenated_keep_one_shared_buffer_for_their_empty_columns() -> None:
    """Several files (ranks) loaded together: the empty columns are again one shared zero buffer,
    and the table equals Arrow's own concatenation of the files' tables."""
    folder = SAMPLE_TRACES / "regression_pair" / "new"
    trace = traceview.load(folder, use_cache=False, jobs=1)
    assert len(trace.ranks) > 1
    empty = [f.name for f in EVENT_SCHEMA if f.nullable and trace.events.column(f.name).null_count == trace.num_events]
    assert len(empty) >= 2, "the sample has no empty optional column: the test would check nothing"
    assert len({_data_address(trace.events.column(name)) for name in empty}) == 1
    files = sorted(folder.glob("*.json*"))
    parts = [traceview.load(f, use_cache=False, jobs=1).events for f in files]
    expected = pa.concat_tables([p.drop_columns(["rank"]) for p in parts]).unify_dictionaries().combine_chunks()
    assert trace.events.drop_columns(["rank"]).equals(expected)
