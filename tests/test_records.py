"""Incremental Parquet: parts written atomically as the run goes, readable at any time,
merged into one file whose bytes depend on the rows only; restoring a checkpoint's parts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from simfl import records
from simfl.errors import InputError
from simfl.plots.runs import ASYNC_FIGURES, RUN_FIGURES
from simfl.records import (
    SCHEMAS,
    AvailabilityRows,
    ClientRows,
    Committed,
    CommRows,
    DeviceRows,
    EvalRows,
    Recorder,
    RoundRow,
    part_path,
    read_table,
    table_exists,
)
from simfl.rundir import PARTS_DIR, RUN_PLOTS, TABLES, write_atomically


def append_rounds(recorder: Recorder, rounds: range) -> None:
    for r in rounds:
        recorder.write(RoundRow(round=r, t_start_s=float(r), t_end_s=r + 0.5, num_online=10,
                                num_selected=4, num_kept=2, num_aggregated=2, num_dropped=0,
                                quantile_estimate=np.nan if r % 2 else 0.25 * r, lr=0.1,
                                bytes_down=100 * r, bytes_up=50 * r))


@pytest.mark.parametrize("rows", [RoundRow, ClientRows, CommRows, EvalRows, AvailabilityRows,
                                  DeviceRows])
def test_each_row_builder_is_its_tables_schema(rows: type) -> None:
    assert [f for f in rows.__dataclass_fields__ if f != "TABLE"] == SCHEMAS[rows.TABLE].names


def test_typed_rows_write_what_the_columns_would(tmp_path: Path) -> None:
    typed, columns = Recorder(tmp_path / "typed"), Recorder(tmp_path / "columns")
    rows = CommRows(round=3, client_idx=np.array([4, 1]), direction=["down", "up"],
                    kind=["model", "update"], bytes=np.array([10, 20]),
                    t_start_s=np.array([0.0, 1.5]), t_end_s=np.array([1.0, 2.5]),
                    completed=np.array([True, False]))
    typed.write(rows)
    columns.append("comm", round=3, client_idx=np.array([4, 1]), direction=["down", "up"],
                   kind=["model", "update"], bytes=np.array([10, 20]),
                   t_start_s=np.array([0.0, 1.5]), t_end_s=np.array([1.0, 2.5]), shadow=None,
                   completed=np.array([True, False]))
    typed.merge()
    columns.merge()
    assert ((tmp_path / "typed" / "comm.parquet").read_bytes()
            == (tmp_path / "columns" / "comm.parquet").read_bytes())


def test_the_run_layout_names_every_table_of_the_schemas() -> None:
    assert tuple(SCHEMAS) == TABLES  # the files and parts --overwrite may delete


def test_every_figure_a_run_can_have_is_in_its_layout() -> None:
    assert set(RUN_FIGURES) | set(ASYNC_FIGURES) <= set(RUN_PLOTS)  # plot_run_bias's: test_resume


def parts(run_dir: Path, table: str) -> list[str]:
    return sorted(p.name for p in (run_dir / PARTS_DIR / table).iterdir())


def test_parts_are_readable_while_running_and_merged_at_the_end(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, flush_every=3)
    append_rounds(recorder, range(7))  # two parts of 3 rows; one row still buffered
    assert parts(tmp_path, "rounds") == ["part-000000.parquet", "part-000001.parquet"]
    assert read_table(tmp_path, "rounds")["round"].to_list() == list(range(6))
    assert recorder.flush()["rounds"] == Committed(3, 7)
    running = read_table(tmp_path, "rounds")
    assert running["round"].to_list() == list(range(7))
    np.testing.assert_array_equal(running["quantile_estimate"].to_numpy(),
                                  [0.0, np.nan, 0.5, np.nan, 1.0, np.nan, 1.5])
    assert read_table(tmp_path, "eval").height == 0  # no rows yet: empty, with the schema
    assert read_table(tmp_path, "eval").columns[:3] == ["round", "t_s", "client_id"]
    recorder.merge()
    assert parts(tmp_path, "rounds") == ["part-000000.parquet", "part-000001.parquet",
                                         "part-000002.parquet"]  # until the run is complete
    (tmp_path / PARTS_DIR / "rounds" / "notes.txt").write_text("a user's")
    recorder.remove_parts()
    assert parts(tmp_path, "rounds") == ["notes.txt"]  # what simfl did not write stays
    assert not (tmp_path / PARTS_DIR / "eval").exists()
    assert pl.read_parquet(tmp_path / "rounds.parquet").equals(running)
    assert read_table(tmp_path, "rounds").equals(running)
    assert read_table(str(tmp_path), "rounds").equals(running)  # a path as text, as in README
    assert pl.read_parquet(tmp_path / "eval.parquet").height == 0
    assert not list(tmp_path.glob("**/*.tmp"))


def test_merged_bytes_do_not_depend_on_where_the_parts_were_cut(tmp_path: Path) -> None:
    files = []
    for flush_every in (1, 4, 1000):
        run_dir = tmp_path / str(flush_every)
        recorder = Recorder(run_dir, flush_every=flush_every)
        append_rounds(recorder, range(5))
        recorder.flush()  # as a checkpoint would, in the middle
        append_rounds(recorder, range(5, 9))
        recorder.merge()
        files.append((run_dir / "rounds.parquet").read_bytes())
    assert files[0] == files[1] == files[2]


@pytest.mark.parametrize("group_rows", [4, 1 << 17])
def test_the_merge_is_the_whole_table_sorted_by_round_part_by_part(
        tmp_path: Path, group_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts whose rounds overlap (a straggler's round written after later rounds) and an
    empty one merge to the bytes of all rows stably sorted by round and written at once."""
    monkeypatch.setattr(records.writer, "ROW_GROUP_ROWS", group_rows)
    schema = SCHEMAS["comm"]
    rounds = [[0, 0, 1, 2], [1, 3, 3], [], [2, 4], [4, 5, 6, 5, 7, 7, 8], [6, 9]]
    paths, seen = [], 0
    for i, part in enumerate(rounds):
        table = pa.table({f.name: _values(f, part, seen) for f in schema}, schema=schema)
        paths.append(tmp_path / f"part-{i:06d}.parquet")
        pq.write_table(table, paths[-1])
        seen += len(part)
    records.merge_parts(paths, schema, tmp_path / "merged.parquet")
    whole = pa.concat_tables([pq.read_table(p, schema=schema) for p in paths])
    order = np.argsort(whole.column("round").to_numpy(), kind="stable")
    pq.write_table(whole.take(order), tmp_path / "at_once.parquet", row_group_size=group_rows)
    merged = (tmp_path / "merged.parquet").read_bytes()
    assert merged == (tmp_path / "at_once.parquet").read_bytes()
    got = pq.read_table(tmp_path / "merged.parquet")
    assert got.column("round").to_pylist() == sorted(r for part in rounds for r in part)
    # stable: within a round, the rows keep the parts' order (bytes is each row's index)
    assert got.column("bytes").to_pylist()[:4] == [0, 1, 2, 4]
    assert pq.read_metadata(tmp_path / "merged.parquet").num_row_groups == -(-seen // group_rows)
    records.merge_parts([paths[2]], schema, tmp_path / "empty.parquet")  # as write_table
    pq.write_table(schema.empty_table(), tmp_path / "empty_at_once.parquet")
    assert (tmp_path / "empty.parquet").read_bytes() == \
        (tmp_path / "empty_at_once.parquet").read_bytes()


def _values(field: pa.Field, rounds: list[int], first: int) -> list[object]:
    """A column of rows in the given rounds: the rounds, else each row's index."""
    index = list(range(first, first + len(rounds)))
    if field.name == "round":
        return rounds
    if field.type == pa.string():
        return [f"row {i}" for i in index]
    if field.type == pa.bool_():
        return [i % 2 == 0 for i in index]
    return [float(i) for i in index] if pa.types.is_floating(field.type) else index


def test_restoring_a_checkpoint_drops_later_parts_and_an_unfinished_merge(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, flush_every=2)
    append_rounds(recorder, range(4))
    committed = recorder.flush()  # the checkpoint: 2 parts, 4 rows
    append_rounds(recorder, range(4, 8))  # written after it, then the process died
    (tmp_path / "rounds.parquet").write_bytes(b"half a merge")
    (tmp_path / PARTS_DIR / "rounds" / "part-000004.parquet.tmp").write_bytes(b"torn")
    resumed = Recorder(tmp_path, flush_every=2, committed=committed)
    assert parts(tmp_path, "rounds") == ["part-000000.parquet", "part-000001.parquet"]
    assert not (tmp_path / "rounds.parquet").exists()
    resumed.mute(True)
    append_rounds(resumed, range(4))  # replayed rows: already on disk
    resumed.mute(False)
    append_rounds(resumed, range(4, 6))
    resumed.merge()
    assert read_table(tmp_path, "rounds")["round"].to_list() == list(range(6))


@pytest.mark.parametrize("damage", ["missing part", "short part"])
def test_parts_that_do_not_match_the_checkpoint_are_an_input_error(tmp_path: Path,
                                                                     damage: str) -> None:
    recorder = Recorder(tmp_path, flush_every=2)
    append_rounds(recorder, range(4))
    committed = recorder.flush()
    first = tmp_path / PARTS_DIR / "rounds" / "part-000000.parquet"
    if damage == "missing part":
        first.unlink()
    else:
        pq.write_table(pq.read_table(first).slice(0, 1), first)
    (tmp_path / "rounds.parquet").write_bytes(b"merged")  # the only copy of some rows, maybe
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(InputError, match=r"rounds: the part files do not hold the 2 parts and 4"):
        Recorder(tmp_path, committed=committed)
    assert sorted(tmp_path.rglob("*")) == before  # nothing removed


def test_muted_appends_are_checked_then_dropped(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, flush_every=1)
    recorder.mute(True)
    append_rounds(recorder, range(3))
    with pytest.raises(ValueError, match=r"rounds\.parquet: columns differ .*'round'"):
        recorder.append("rounds", t_start_s=0.0)
    recorder.mute(False)
    assert not (tmp_path / PARTS_DIR / "rounds").exists()
    recorder.merge()
    assert pl.read_parquet(tmp_path / "rounds.parquet").height == 0


def test_read_table_of_a_missing_table(tmp_path: Path) -> None:
    assert not table_exists(tmp_path, "rounds")
    with pytest.raises(FileNotFoundError, match=r"rounds\.parquet: no such table"):
        read_table(tmp_path, "rounds")
    recorder = Recorder(tmp_path, flush_every=1)
    append_rounds(recorder, range(1))
    assert table_exists(tmp_path, "rounds") and not table_exists(tmp_path, "eval")


def test_write_atomically_keeps_the_old_file_when_writing_fails(tmp_path: Path) -> None:
    path = tmp_path / "state.bin"
    write_atomically(path, lambda tmp: tmp.write_bytes(b"old"))

    def torn(tmp: Path) -> None:
        tmp.write_bytes(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, torn)
    assert path.read_bytes() == b"old"
    write_atomically(path, lambda tmp: tmp.write_bytes(b"new"))
    assert path.read_bytes() == b"new"
    assert sorted(tmp_path.iterdir()) == [path]  # the torn temporary file was replaced


def clients_rows(round_idx: int, loss: object, train_loss: object) -> dict[str, object]:
    return dict(round=round_idx, client_id=["a", "b", "c"], client_idx=np.arange(3),
                status=["aggregated", "nonfinite", "filtered"], loss_reported=loss,
                train_loss=train_loss, num_samples=np.ones(3, dtype=np.int64), bytes_down=0,
                bytes_up=0, t_dispatch_s=0.0, t_done_s=np.zeros(3), staleness=0,
                model_version=round_idx)


def test_masked_values_are_null_and_nan_stays_nan(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path)
    nan = np.nan
    recorder.append("clients", **clients_rows(
        0, np.ma.masked_array([0.5, nan, 0.1], [False, False, False]),
        np.ma.masked_array([0.4, nan, nan], [False, False, True])))
    recorder.append("clients", **clients_rows(1, np.array([0.5, nan, 0.1]), np.zeros(3)))
    recorder.merge()
    rows = pl.read_parquet(tmp_path / "clients.parquet")
    first = rows.filter(pl.col("round") == 0)
    assert first["loss_reported"].is_nan().to_list() == [False, True, False]
    assert first["train_loss"].is_null().to_list() == [False, False, True]
    assert first["train_loss"][1] != first["train_loss"][1]  # NaN: a diverged update
    # a plain array's NaN still means "missing" (null), as before
    assert rows.filter(pl.col("round") == 1)["loss_reported"].null_count() == 1


def test_merged_rows_are_in_round_order_and_stable_within_a_round(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, flush_every=1)
    for r in (2, 0, 1, 0):  # a round's rows come once its stragglers are done
        recorder.append("clients", **clients_rows(r, np.zeros(3), np.full(3, float(r))))
    recorder.merge()
    rows = pl.read_parquet(tmp_path / "clients.parquet")
    assert rows["round"].to_list() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert rows["client_id"].to_list()[:6] == ["a", "b", "c", "a", "b", "c"]


def test_parts_written_before_a_column_was_added_read_as_null_there(tmp_path: Path) -> None:
    """A run resumed across a release that added a nullable column (eval's client_idx)."""
    parts = tmp_path / PARTS_DIR / "eval"
    parts.mkdir(parents=True)
    old = pl.DataFrame({"round": [0], "t_s": [0.0], "client_id": ["w0"], "split": ["train"],
                        "num_samples": [3], "loss": [1.0], "error": [0.5]})
    old.write_parquet(part_path(parts, 0))
    assert read_table(tmp_path, "eval")["client_idx"].to_list() == [None]
    recorder = Recorder(tmp_path, committed={"eval": Committed(1, 1)})
    recorder.append("eval", round=1, t_s=1.0, client_id=np.array(["w0"]),
                    client_idx=np.array([0]), split="train", num_samples=np.array([3]),
                    loss=np.array([0.9]), error=np.array([0.4]))
    assert read_table(tmp_path, "eval")["client_idx"].to_list() == [None]  # not flushed yet
    recorder.merge()
    merged = pl.read_parquet(tmp_path / "eval.parquet")
    assert merged["client_idx"].to_list() == [None, 0]
    assert merged["round"].to_list() == [0, 1]
