"""Write export rows as JSONL (default) or Parquet (the ``[parquet]`` extra: ``pyarrow``, imported only when used).

Parquet files get one fixed schema per format, so that files written page by page (one row group per
:data:`PARQUET_ROW_GROUP` rows) are valid whatever the rows hold: chat messages are ``list<struct>`` columns with
``role``/``content``/``tool_calls``/``tool_call_id``/``name``; values of free shape (rollout inputs, message content
that is not text, tool parameters) are JSON text; token ids are ``list<int64>``, masks ``list<int8>``, call ranges
``list<fixed_size_list<int64, 2>>``.
"""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO, Dict, List, Optional, Sequence

from rollouthub.utils.extras import import_extra

from .selection import ExportFormat, TripletFields

__all__ = [
    "FileFormat",
    "FILE_EXTENSIONS",
    "RowWriter",
    "JsonlWriter",
    "ParquetWriter",
    "file_format_of",
    "open_writer",
    "PARQUET_ROW_GROUP",
]

FileFormat = str
"""``"jsonl"`` or ``"parquet"``."""

FILE_EXTENSIONS: Dict[str, FileFormat] = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".parquet": "parquet",
    ".pq": "parquet",
}
"""Output extensions (any case) and the file format each selects."""


def file_format_of(output: Optional[str], file_format: Optional[FileFormat] = None) -> FileFormat:
    """The file format to write: ``file_format`` when given, JSON Lines for stdout (``None`` or ``"-"``), else from
    the output's extension (:data:`FILE_EXTENSIONS`).

    Raises:
        ValueError: one line naming the output, for an unknown file format or an extension that selects none (``.csv``;
            ``.json`` too: the rows are JSON Lines, not one JSON document).
    """
    if file_format is not None:
        if file_format not in ("jsonl", "parquet"):
            raise ValueError(f"unknown file format {file_format!r}; use 'jsonl' or 'parquet'")
        return file_format
    if output is None or output == "-":
        return "jsonl"
    extension = os.path.splitext(output)[1].lower()
    if extension not in FILE_EXTENSIONS:
        hint = " (the rows are JSON Lines, one object per line: name it .jsonl)" if extension == ".json" else ""
        raise ValueError(
            f"cannot tell the file format of {output!r} from its extension{hint}; "
            f"use {', '.join(FILE_EXTENSIONS)} or give --file-format jsonl|parquet"
        )
    return FILE_EXTENSIONS[extension]


PARQUET_ROW_GROUP = 1000


def encode_jsonl(row: Dict[str, Any]) -> bytes:
    """One JSONL line (UTF-8, compact, non-ASCII kept; ``NaN`` is rejected)."""
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode() + b"\n"


class RowWriter:
    """Receives rows one by one; :meth:`close` flushes."""

    def write(self, row: Dict[str, Any]) -> None:
        """Write one row."""
        raise NotImplementedError

    def close(self) -> None:
        """Flush and finish the file."""


class JsonlWriter(RowWriter):
    """One JSON object per line."""

    def __init__(self, stream: BinaryIO) -> None:
        """Write to a binary stream (a file or ``sys.stdout.buffer``)."""
        self.stream = stream

    def write(self, row: Dict[str, Any]) -> None:
        """Write one line."""
        self.stream.write(encode_jsonl(row))

    def close(self) -> None:
        """Flush the stream (the caller closes it)."""
        self.stream.flush()


def _json_text(value: Any) -> Optional[str]:
    return None if value is None else json.dumps(value, ensure_ascii=False, sort_keys=True)


def _text(value: Any) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _messages(messages: Optional[Sequence[Any]]) -> Optional[List[Dict[str, Any]]]:
    if messages is None:
        return None
    out = []
    for message in messages:
        calls = message.get("tool_calls")
        out.append(
            {
                "role": message.get("role"),
                "content": _text(message.get("content")),
                "tool_calls": None
                if not calls
                else [
                    {
                        "id": call.get("id"),
                        "type": call.get("type"),
                        "function": {
                            "name": (call.get("function") or {}).get("name"),
                            "arguments": _text((call.get("function") or {}).get("arguments")),
                        },
                    }
                    for call in calls
                ],
                "tool_call_id": message.get("tool_call_id"),
                "name": message.get("name"),
            }
        )
    return out


def _tools(tools: Optional[Sequence[Any]]) -> Optional[List[Dict[str, Any]]]:
    if tools is None:
        return None
    return [
        {
            "type": tool.get("type"),
            "function": {
                "name": (tool.get("function") or {}).get("name"),
                "description": (tool.get("function") or {}).get("description"),
                "parameters": _json_text((tool.get("function") or {}).get("parameters")),
            },
        }
        for tool in tools
    ]


def _parquet_row(format: str, row: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(row)
    if "input" in out:
        out["input"] = _json_text(out["input"])
    for key in ("messages", "prompt", "completion", "chosen", "rejected"):
        if key in out and isinstance(out[key], list):
            out[key] = _messages(out[key])
    if "tools" in out:
        out["tools"] = _tools(out["tools"])
    return out


def parquet_schema(format: ExportFormat, triplet_fields: TripletFields = "completion") -> Any:
    """The pyarrow schema of ``format`` (imports pyarrow: :class:`~rollouthub.utils.extras.MissingExtraError`);
    ``triplet_fields`` picks the answer columns of ``triplets``."""
    pa = import_extra("pyarrow", extra="parquet", feature="Parquet export")
    s, f64, i64 = pa.string(), pa.float64(), pa.int64()
    call = pa.struct([("id", s), ("type", s), ("function", pa.struct([("name", s), ("arguments", s)]))])
    message = pa.list_(
        pa.struct([("role", s), ("content", s), ("tool_calls", pa.list_(call)), ("tool_call_id", s), ("name", s)])
    )
    tool = pa.struct([("type", s), ("function", pa.struct([("name", s), ("description", s), ("parameters", s)]))])
    ids = [("rollout_id", s), ("attempt_id", s), ("resources_id", s), ("mode", s)]
    fields: Dict[str, List[Any]] = {
        "messages": [
            *ids,
            ("status", s),
            ("input", s),
            ("conversation", i64),
            ("messages", message),
            ("tools", pa.list_(tool)),
            ("reward", f64),
        ],
        "triplets": [
            *ids,
            ("step", i64),
            ("prompt", message),
            *(
                [("completion", message), ("prompt_token_ids", pa.list_(i64)), ("completion_token_ids", pa.list_(i64))]
                if triplet_fields == "completion"
                else [("response", s), ("prompt_token_ids", pa.list_(i64)), ("response_token_ids", pa.list_(i64))]
            ),
            ("reward", f64),
            ("final_reward", f64),
            ("response_id", s),
            ("model", s),
        ],
        "preferences": [
            ("input", s),
            ("prompt", message),
            ("chosen", message),
            ("rejected", message),
            ("tools", pa.list_(tool)),
            ("chosen_reward", f64),
            ("rejected_reward", f64),
            ("chosen_rollout_id", s),
            ("rejected_rollout_id", s),
            ("chosen_resources_id", s),
            ("rejected_resources_id", s),
        ],
        "rewards": [*ids, ("status", s), ("start_time", f64), ("end_time", f64), ("reward", f64)],
        "trajectories": [
            *ids,
            ("status", s),
            ("level", s),
            ("sample", i64),
            ("input_id", s),
            ("prompt_ids", pa.list_(i64)),
            ("response_ids", pa.list_(i64)),
            ("response_mask", pa.list_(pa.int8())),
            ("response_logprobs", pa.list_(f64)),
            ("reward", f64),
            ("call_rewards", pa.list_(f64)),
            ("call_ranges", pa.list_(pa.list_(i64, 2))),
            ("policy_version", i64),
            ("call_policy_versions", pa.list_(i64)),
            ("span_ids", pa.list_(s)),
        ],
    }
    return pa.schema(fields[format])


class ParquetWriter(RowWriter):
    """Parquet with the fixed schema of the format; rows are buffered and written one row group at a time."""

    def __init__(self, path: str, format: ExportFormat, triplet_fields: TripletFields = "completion") -> None:
        """Create ``path`` (imports pyarrow: :class:`~rollouthub.utils.extras.MissingExtraError` without it)."""
        self.schema = parquet_schema(format, triplet_fields)
        pq = import_extra("pyarrow.parquet", extra="parquet", feature="Parquet export", package="pyarrow")
        self._pa = import_extra("pyarrow", extra="parquet", feature="Parquet export")
        self.format = format
        self._writer = pq.ParquetWriter(path, self.schema, compression="zstd")
        self._buffer: List[Dict[str, Any]] = []

    def write(self, row: Dict[str, Any]) -> None:
        """Buffer one row; a full buffer becomes a row group."""
        self._buffer.append(_parquet_row(self.format, row))
        if len(self._buffer) >= PARQUET_ROW_GROUP:
            self._flush()

    def _flush(self) -> None:
        if self._buffer:
            self._writer.write_table(self._pa.Table.from_pylist(self._buffer, schema=self.schema))
            self._buffer = []

    def close(self) -> None:
        """Write the last row group and the footer."""
        self._flush()
        self._writer.close()


def open_writer(
    file_format: FileFormat,
    format: ExportFormat,
    path: Optional[str],
    stream: Optional[BinaryIO],
    triplet_fields: TripletFields = "completion",
) -> RowWriter:
    """A writer for ``file_format`` to ``path`` (Parquet needs a path) or to ``stream`` (JSONL)."""
    if file_format == "parquet":
        if path is None:
            raise ValueError("Parquet needs an output file (-o FILE.parquet); it cannot be written to stdout")
        return ParquetWriter(path, format, triplet_fields)
    if file_format != "jsonl":
        raise ValueError(f"unknown file format {file_format!r}; use 'jsonl' or 'parquet'")
    if stream is None:
        raise ValueError("JSONL needs an output stream")
    return JsonlWriter(stream)
