"""import_sales FILE: JSON lines or CSV, the API's validation, rejected lines listed beside the file."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from catalogue.models import Product
from rankings.ingest import imports
from rankings.ingest.imports import rejected_path_for, sales_import
from rankings.models import IngestLog, Sale

pytestmark = pytest.mark.django_db


def jsonl(*lines) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def sale_event(event_id, **fields):
    return {
        "id": event_id,
        "ts": "2026-01-05T10:00:00Z",
        "productId": "p1",
        "qty": 1,
        "amount": "9.99",
        **fields,
    }


def rejected_lines(path) -> list[dict]:
    return [json.loads(line) for line in rejected_path_for(path).read_text().splitlines()]


def test_a_json_lines_file_is_imported_and_its_bad_lines_are_listed(tmp_path):
    # given a file with good events, a bad one, a line that is not JSON, a blank line and a resend
    path = tmp_path / "sales.jsonl"
    path.write_text(
        jsonl(
            sale_event("a"),
            sale_event("b", qty=0),
            '{"id": "c", "ts": ',
            "",
            sale_event("d", categories=["toys", "gifts"]),
            sale_event("a"),
            "[1, 2]",
        )
    )

    # when
    report = sales_import(path=path)

    # then
    assert (report.lines, report.accepted, report.duplicates, report.rejected) == (6, 2, 1, 3)
    assert set(Sale.objects.values_list("event_id", flat=True)) == {"a", "d"}
    assert rejected_lines(path) == [
        {"line": 2, "id": "b", "error": "qty must be a non-zero integer"},
        {
            "line": 3,
            "id": None,
            "error": "line is not valid JSON: Expecting value: line 1 column 19 (char 18)",
        },
        {"line": 7, "id": None, "error": "event must be a JSON object"},
    ]
    assert report.rejected_path == tmp_path / "sales.jsonl.rejected.jsonl"


def test_a_csv_file_is_imported_with_empty_cells_as_absent(tmp_path):
    # given a catalogue product, for the price and categories that empty cells leave to it
    Product.objects.create(product_id="p1", name="Kite", price_cents=1250)
    path = tmp_path / "sales.csv"
    path.write_text(
        "id,ts,productId,categories,qty,amount,returnOf\n"
        "a,2026-01-05T10:00:00Z,p1,toys|gifts,2,20.00,\n"
        "b,1767607200,p1,books; garden,3,,\n"
        "c,2026-01-05T11:00:00+01:00,p1,,1,5,\n"
        "r,2026-01-06T10:00:00Z,p1,,-1,,a\n"
    )

    # when
    report = sales_import(path=path)

    # then
    assert (report.accepted, report.rejected) == (4, 0)
    stored = {s.event_id: s for s in Sale.objects.all()}
    assert stored["a"].categories == ["toys", "gifts"]
    assert stored["b"].categories == ["books", "garden"]
    assert stored["b"].amount_cents == 3750  # catalogue price × qty
    assert stored["c"].categories == []
    assert (stored["r"].qty, stored["r"].return_of, stored["r"].amount_cents) == (-1, "a", 1000)
    assert not rejected_path_for(path).exists()


def test_bad_csv_records_are_rejected_with_their_line_numbers(tmp_path):
    path = tmp_path / "sales.csv"
    path.write_text(
        "id,ts,productId,qty,amount\n"
        "a,2026-01-05T10:00:00Z,p1,1,9.99\n"
        "b,2026-01-05T10:00:00Z,p1,two,9.99\n"
        "c,2026-01-05T10:00:00Z,p1,1\n"
        ",2026-01-05T10:00:00Z,p1,1,9.99\n"
        "e,2026-01-05 10:00:00,p1,1,9.99\n"
        "f,2026-01-05T10:00:00Z,p1,1.5,9.99\n"
        "\n"
        '"g\nh",2026-01-05T10:00:00Z,p1,1,-3\n'
    )

    report = sales_import(path=path)

    assert (report.accepted, report.rejected) == (1, 6)
    assert rejected_lines(path) == [
        {"line": 3, "id": "b", "error": "qty must be a non-zero integer"},
        {"line": 4, "id": None, "error": "expected 5 cells as in the header, found 4"},
        {"line": 5, "id": None, "error": "id is required"},
        {"line": 6, "id": "e", "error": "ts has no UTC offset; add Z or +00:00"},
        {"line": 7, "id": "f", "error": "qty must be a non-zero integer"},
        {"line": 10, "id": None, "error": "id may not contain the control or format character U+000A"},
    ]


def test_a_csv_header_without_the_required_columns_stops_the_import(tmp_path):
    path = tmp_path / "sales.csv"
    path.write_text("id,when,productId,qty\na,2026-01-05T10:00:00Z,p1,1\n")

    with pytest.raises(CommandError, match="missing: ts"):
        call_command("import_sales", str(path), "--no-progress")
    assert not Sale.objects.exists()


def test_a_missing_file_is_an_error(tmp_path):
    with pytest.raises(CommandError, match="no such file"):
        call_command("import_sales", str(tmp_path / "nothing.jsonl"))


def test_lines_that_are_not_utf8_are_rejected(tmp_path):
    # given one good and one undecodable line in each format
    good = json.dumps(sale_event("a")).encode()
    jsonl_path = tmp_path / "sales.jsonl"
    jsonl_path.write_bytes(good + b"\n" + b'{"id": "\xff"}\n')
    csv_path = tmp_path / "sales.csv"
    csv_path.write_bytes(
        b"id,ts,productId,qty\nb,2026-01-05T10:00:00Z,p1,1\nc\xff,2026-01-05T10:00:00Z,p1,1\n"
    )

    # when
    from_jsonl = sales_import(path=jsonl_path)
    from_csv = sales_import(path=csv_path)

    # then
    assert (from_jsonl.accepted, from_csv.accepted) == (1, 1)
    assert rejected_lines(jsonl_path) == [{"line": 2, "id": None, "error": "line is not valid UTF-8"}]
    assert rejected_lines(csv_path) == [{"line": 3, "id": None, "error": "line is not valid UTF-8"}]


def test_a_large_file_is_ingested_in_chunks_with_line_numbers_kept(tmp_path, monkeypatch):
    """Each chunk is one sales_ingest call; rejections still point at the file's own lines."""
    # given chunks of 3 events and a bad event in the third chunk
    monkeypatch.setattr(imports, "CHUNK_EVENTS", 3)
    events = [sale_event(f"e{i}") for i in range(8)]
    events[7]["qty"] = "many"
    path = tmp_path / "sales.jsonl"
    path.write_text(jsonl(*events))

    # when
    report = sales_import(path=path)

    # then
    assert (report.accepted, report.rejected) == (7, 1)
    assert rejected_lines(path) == [{"line": 8, "id": "e7", "error": "qty must be a non-zero integer"}]
    assert IngestLog.objects.filter(source="import").count() == 3


def test_importing_the_same_file_again_only_finds_duplicates(tmp_path):
    # given a file imported once, with a bad line
    path = tmp_path / "sales.jsonl"
    path.write_text(jsonl(sale_event("a"), sale_event("b")))
    sales_import(path=path)

    # when it is imported again, after the bad line was fixed
    report = sales_import(path=path)

    # then
    assert (report.accepted, report.duplicates, report.rejected) == (0, 2, 0)
    assert not rejected_path_for(path).exists()


def test_a_fixed_file_replaces_the_old_list_of_rejected_lines(tmp_path):
    path = tmp_path / "sales.jsonl"
    path.write_text(jsonl(sale_event("a", qty=0)))
    sales_import(path=path)
    assert rejected_path_for(path).exists()

    path.write_text(jsonl(sale_event("a")))
    sales_import(path=path)

    assert not rejected_path_for(path).exists()


def test_the_command_prints_a_summary_with_the_commonest_reasons(tmp_path):
    path = tmp_path / "sales.data"  # no telling suffix: the format is sniffed
    path.write_text(jsonl(sale_event("a"), sale_event("b", qty=0), sale_event("c", qty=0), sale_event("a")))
    out = StringIO()

    call_command("import_sales", str(path), "--no-progress", stdout=out)

    assert out.getvalue().splitlines() == [
        "        2  qty must be a non-zero integer",
        "4 events read: 1 accepted, 1 duplicates, 2 rejected",
        f"rejected lines, with their numbers and reasons: {rejected_path_for(path)}",
    ]


def test_the_format_can_be_named(tmp_path):
    path = tmp_path / "sales.txt"
    path.write_text("id,ts,productId,qty\na,2026-01-05T10:00:00Z,p1,1\n")

    call_command("import_sales", str(path), "--format", "csv", "--no-progress", stdout=StringIO())

    assert Sale.objects.filter(event_id="a").exists()
