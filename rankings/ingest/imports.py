"""Import sale or engagement events from a file (JSON lines or CSV) through the same validation as the API.

The file is read as a stream and handed to `sales_ingest` (or
`engagements_ingest`) in chunks of the API's batch size, so a file of any size takes bounded memory and each chunk
commits on its own. Every rejected line is written, with its line number and
reason, to a file beside the input, so it can be fixed and imported again.
"""

import csv
import functools
import io
import itertools
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, TypeVar

from tqdm import tqdm

from rankings.conf import rankings_settings
from rankings.ingest.engagement import engagements_ingest
from rankings.ingest.events import json_decoded
from rankings.ingest.sales import sales_ingest

# The API's batch limit: one transaction per chunk, and a chunk is the unit the
# ingest path is measured and tuned for.
CHUNK_EVENTS = rankings_settings.MAX_BATCH_EVENTS

T = TypeVar("T")

CSV_COLUMNS = ("id", "ts", "productId", "categories", "qty", "amount", "returnOf")
CSV_REQUIRED = ("id", "ts", "productId", "qty")
_CATEGORY_SEPARATOR = re.compile(r"[|;]")
_INTEGER = re.compile(r"[+-]?[0-9]{1,9}", re.ASCII)
_UNDECODABLE = re.compile("[\udc80-\udcff]")  # what surrogateescape makes of bytes that are not UTF-8


@dataclass(frozen=True)
class _Kind:
    """What differs between importing sales and engagement events."""

    ingest: Callable
    chunk: Callable[[], int]  # read when an import starts, so a changed setting applies
    columns: tuple[str, ...]
    required: tuple[str, ...]


_SALES = _Kind(sales_ingest, lambda: CHUNK_EVENTS, CSV_COLUMNS, CSV_REQUIRED)
_ENGAGEMENT = _Kind(
    engagements_ingest,
    lambda: rankings_settings.MAX_ENGAGEMENT_BATCH_EVENTS,
    ("id", "ts", "productId", "categories", "kind"),
    ("ts", "productId", "kind"),
)


class ImportFileError(ValueError):
    """The file as a whole cannot be read (no such file, CSV without the needed columns)."""


@dataclass
class ImportReport:
    lines: int = 0  # events read: non-blank lines of JSON, records of CSV
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    rejected_path: Path | None = None
    reasons: dict[str, int] = field(default_factory=dict)

    def summary(self, reasons: int = 5) -> str:
        """The counts, after the most frequent reasons for rejection."""
        common = sorted(self.reasons.items(), key=lambda item: -item[1])[:reasons]
        lines = [f"{count:>9}  {reason}" for reason, count in common]
        lines.append(
            f"{self.lines} events read: {self.accepted} accepted, {self.duplicates} duplicates, "
            f"{self.rejected} rejected"
        )
        if self.rejected_path:
            lines.append(f"rejected lines, with their numbers and reasons: {self.rejected_path}")
        return "\n".join(lines)


@dataclass(slots=True)
class _Line:
    number: int
    event: object = None
    error: str | None = None  # set when the line could not even be parsed into an event


def rejected_path_for(path: Path) -> Path:
    return path.with_name(path.name + ".rejected.jsonl")


def sales_import(*, path: str | Path, file_format: str | None = None, progress: bool = False) -> ImportReport:
    """Import every event of `path`; `file_format` is "jsonl" or "csv" (default: from the name)."""
    return _import(_SALES, path=path, file_format=file_format, progress=progress)


def engagements_import(
    *, path: str | Path, file_format: str | None = None, progress: bool = False
) -> ImportReport:
    """Import every engagement event of `path`, as sales_import does sales."""
    return _import(_ENGAGEMENT, path=path, file_format=file_format, progress=progress)


def _import(kind: _Kind, *, path: str | Path, file_format: str | None, progress: bool) -> ImportReport:
    path = Path(path)
    if not path.is_file():
        raise ImportFileError(f"no such file: {path}")
    file_format = file_format or _format_of(path)
    report = ImportReport()
    out_path = rejected_path_for(path)
    out_path.unlink(missing_ok=True)  # a stale list from an earlier import would mislead
    rejected_out = None

    with (
        path.open("rb") as raw,
        tqdm(
            total=path.stat().st_size, unit="B", unit_scale=True, desc=path.name, disable=not progress
        ) as bar,
    ):
        lines = _csv_lines(raw, kind) if file_format == "csv" else _json_lines(raw)
        try:
            for chunk in chunked(lines, kind.chunk()):
                rejections = _import_chunk(chunk, report, kind)
                if rejections:
                    if rejected_out is None:
                        rejected_out = out_path.open("w", encoding="utf-8")
                        report.rejected_path = out_path
                    for rejection in rejections:
                        rejected_out.write(json.dumps(rejection) + "\n")
                bar.set_postfix(
                    accepted=report.accepted,
                    duplicates=report.duplicates,
                    rejected=report.rejected,
                    refresh=False,
                )
                bar.update(raw.tell() - bar.n)
        finally:
            if rejected_out is not None:
                rejected_out.close()
    return report


def _format_of(path: Path) -> str:
    if path.suffix.lower() == ".csv":
        return "csv"
    if path.suffix.lower() in (".jsonl", ".ndjson", ".json"):
        return "jsonl"
    with path.open("rb") as f:
        start = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return "jsonl" if start.startswith(b"{") else "csv"


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """Lists of `size` items in order, the last one shorter (itertools.batched, before Python 3.12)."""
    items = iter(items)
    while chunk := list(itertools.islice(items, size)):
        yield chunk


class _Rejection(TypedDict):
    line: int
    id: str | None
    error: str


def _import_chunk(chunk: list[_Line], report: ImportReport, kind: _Kind = _SALES) -> list[_Rejection]:
    """Ingest the parsed lines of one chunk; return the rejections, in line order."""
    rejections: list[_Rejection] = [
        {"line": line.number, "id": None, "error": line.error} for line in chunk if line.error is not None
    ]
    parsed = [line for line in chunk if line.error is None]
    source = "import" if kind is _SALES else "engage-import"
    result = kind.ingest(events=[line.event for line in parsed], source=source)
    rejections.extend(
        {"line": parsed[r["index"]].number, "id": r["id"], "error": r["error"]} for r in result.rejected
    )
    rejections.sort(key=lambda r: r["line"])
    report.lines += len(chunk)
    report.accepted += result.accepted
    report.duplicates += result.duplicates
    report.rejected += len(rejections)
    for rejection in rejections:
        report.reasons[rejection["error"]] = report.reasons.get(rejection["error"], 0) + 1
    return rejections


def _decode(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _json_lines(raw) -> Iterator[_Line]:
    """One JSON object per line; blank lines are skipped, a line that is not JSON is rejected."""
    for number, data in enumerate(raw, start=1):
        if number == 1:
            data = data.removeprefix(b"\xef\xbb\xbf")
        value = json_decoded(data, functools.partial(_json_line, number, data))
        if value is not _BLANK:
            yield value if isinstance(value, _Line) else _Line(number, event=value)


_BLANK = _Line(0)


def _json_line(number: int, data: bytes) -> object:
    """What json.loads makes of a line: its value, or a _Line saying why it has none (_BLANK: blank)."""
    text = _decode(data)
    if text is None:
        return _Line(number, error="line is not valid UTF-8")
    if not text.strip():
        return _BLANK
    try:
        return json.loads(text.rstrip("\r\n"))
    except RecursionError:
        return _Line(number, error="line is not valid JSON: nested too deeply")
    except ValueError as error:  # also an integer too long to convert
        return _Line(number, error=f"line is not valid JSON: {error}")


def _csv_lines(raw, kind: _Kind = _SALES) -> Iterator[_Line]:
    """Records of a CSV file with a header row; an empty cell means the field is absent."""
    text = io.TextIOWrapper(raw, encoding="utf-8-sig", errors="surrogateescape", newline="")
    try:
        yield from _csv_records(csv.reader(text), kind)
    finally:
        text.detach()  # the caller owns (and closes) the file


def _csv_records(reader, kind: _Kind = _SALES) -> Iterator[_Line]:
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as error:
        raise ImportFileError(f"line 1: {error}") from error
    header = [name.strip() for name in header]
    missing = [name for name in kind.required if name not in header]
    if missing:
        optional = [name for name in kind.columns if name not in kind.required]
        raise ImportFileError(
            f"the CSV header needs the columns {', '.join(kind.required)}; missing: {', '.join(missing)}"
            f" (optional: {', '.join(optional)})"
        )
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            yield _Line(reader.line_num, error=f"line is not valid CSV: {error}")
            continue
        number = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield _Line(number, error=f"expected {len(header)} cells as in the header, found {len(row)}")
        elif any(_UNDECODABLE.search(cell) for cell in row):
            yield _Line(number, error="line is not valid UTF-8")
        else:
            yield _Line(number, event=_csv_event(header, row, kind.columns))


def _csv_event(header: list[str], row: list[str], columns: tuple[str, ...] = CSV_COLUMNS) -> dict:
    """The event a CSV record stands for, in the types JSON would give it."""
    event: dict[str, str | int | list[str]] = {}
    for name, cell in zip(header, row, strict=True):
        if name not in columns or cell == "":
            continue
        if name == "categories":
            event[name] = [slug.strip() for slug in _CATEGORY_SEPARATOR.split(cell) if slug.strip()]
        elif name == "qty":
            cell = cell.strip()
            event[name] = int(cell) if _INTEGER.fullmatch(cell) else cell
        else:
            event[name] = cell
    return event
