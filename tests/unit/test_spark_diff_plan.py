"""The pure half of the Spark consistency diff (spark_on_ray.diff_plan) and the [spark]
config section: chunk ranges, cut points, SQL shapes, row compare and fix SQL."""

from __future__ import annotations

import pytest

from spark_on_ray import diff_plan as plan
from tidb_binlog.config.spark import load_spark_config
from tidb_binlog.errors import ConfigError


def lit(v):
    return "NULL" if v is None else repr(v) if isinstance(v, str) else str(v)


INFO = plan.TableInfo("db", "t", (plan.Column("id", "int"), plan.Column("name", "varchar"),
                                  plan.Column("f", "float"), plan.Column("ts", "timestamp")),
                      key=("id",))
NOKEY = plan.TableInfo("db", "n", (plan.Column("a", "int"), plan.Column("s", "varchar")))


def test_chunk_ranges_cover_everything_without_overlap():
    assert plan.chunk_ranges([]) == [plan.KeyRange(None, None)]
    assert plan.chunk_ranges([(10,), (20,)]) == [
        plan.KeyRange(None, (10,)), plan.KeyRange((10,), (20,)), plan.KeyRange((20,), None)]


def test_split_range_keeps_the_servers_order_and_skips_lo_and_repeats():
    rng = plan.KeyRange((10,), (50,))
    assert plan.split_range(rng, [(10,), (20,), (20,), (30,), (50,)]) == [
        plan.KeyRange((10,), (20,)), plan.KeyRange((20,), (30,)), plan.KeyRange((30,), (50,))]
    assert plan.split_range(rng, [(10,)]) == [rng]        # cannot cut: one range back
    # A _ci collation orders 'a1' before 'B2'; Python would not: no re-sorting here.
    assert plan.split_range(plan.KeyRange(), [("a1",), ("B2",)]) == [
        plan.KeyRange(None, ("a1",)), plan.KeyRange(("a1",), ("B2",)),
        plan.KeyRange(("B2",), None)]
    assert plan.split_step(400, 8) == 50 and plan.split_step(3, 8) == 1


def test_range_predicate_expands_composite_keys_for_the_index():
    where = plan.range_predicate(("a", "b"), plan.KeyRange((1, "x"), (2, "y")), lit)
    assert where == ("((`a` > 1) OR (`a` = 1 AND `b` >= 'x')) AND "
                     "((`a` < 2) OR (`a` = 2 AND `b` < 'y'))")
    assert plan.range_predicate(("a",), plan.KeyRange(), lit) == "TRUE"


def test_row_hash_is_prefix_free_and_null_aware():
    h = plan.row_hash_expr(INFO)
    # NULL is 'N', a value is <byte length>:<text>: NULL vs '' and 'a,b'|'c' vs 'a'|'b,c'
    # cannot produce the same text.
    assert "COALESCE(CONCAT(LENGTH(CONVERT(`name` USING utf8mb4)), ':', " in h
    assert "'N')" in h and h.startswith("MD5(CONCAT(")
    assert "UNIX_TIMESTAMP(`ts`)" in h                     # time-zone independent
    assert "ROUND(`f` / POW(10, FLOOR(LOG10(ABS(`f`)))), 5)" in h  # 6 significant digits


def test_checksum_sql_sums_both_md5_halves_exactly():
    sql = plan.checksum_sql(plan.Chunk(INFO, plan.KeyRange((1,), None)), lit)
    assert sql.startswith("SELECT COUNT(*) AS cnt, CAST(COALESCE(SUM(CAST(CONV(LEFT(h, 16), "
                          "16, 10) AS UNSIGNED)), 0) AS CHAR) AS s1, ")
    # The MD5 is computed once per row, in a derived table MariaDB may not merge.
    assert sql.count("MD5(") == 1 and "CONV(RIGHT(h, 16)" in sql
    assert sql.endswith("WHERE ((`id` >= 1)) LIMIT 18446744073709551615) AS x")
    bucket = plan.bucket_checksum_sql(NOKEY, 7)
    assert "MOD(CAST(CONV(LEFT(h, 8), 16, 10) AS UNSIGNED), 7)" in bucket
    assert bucket.count("MD5(") == 1 and bucket.endswith("GROUP BY bucket")
    assert plan.bucket_count(1000, 256) == 4 and plan.bucket_count(0, 256) == 1


def _row(*raw):
    return tuple(raw) + tuple(None if v is None else str(v) for v in raw)


def test_compare_keyed_finds_missing_extra_changed():
    info = plan.TableInfo("db", "t", (plan.Column("id", "int"), plan.Column("v", "varchar")),
                          ("id",))
    up = [_row(1, "a"), _row(2, None), _row(3, "c")]
    down = [_row(2, ""), _row(3, "c"), _row(4, "d")]
    diffs = plan.compare_keyed(info, up, down)
    assert [(d.kind, d.key()) for d in diffs] == [
        ("missing", (1,)), ("changed", (2,)), ("extra", (4,))]
    sql = plan.render_fix_sql(diffs, lit)
    assert sql == ["DELETE FROM `db`.`t` WHERE `id` = 4",
                   "REPLACE INTO `db`.`t` (`id`, `v`) VALUES (1, 'a')",
                   "REPLACE INTO `db`.`t` (`id`, `v`) VALUES (2, NULL)"]


def test_compare_multiset_counts_copies():
    up = [_row(1, "x"), _row(1, "x"), _row(2, "y")]
    down = [_row(1, "x"), _row(2, "y"), _row(3, "z"), _row(3, "z")]
    diffs = plan.compare_multiset(NOKEY, up, down)
    assert [(d.kind, d.count) for d in diffs] == [("missing", 1), ("extra", 2)]
    sql = plan.render_fix_sql(diffs, lit)
    # every DELETE first (see the next test); columns matched as bytes, not as text
    assert sql[0] == ("DELETE FROM `db`.`n` WHERE CAST(CAST(`a` AS CHAR) AS BINARY) <=> '3' "
                      "AND CAST(CONVERT(`s` USING utf8mb4) AS BINARY) <=> 'z' LIMIT 2")
    assert sql[1] == "INSERT INTO `db`.`n` (`a`, `s`) VALUES (1, 'x')"


CI = plan.TableInfo("db", "c", (plan.Column("k", "varchar", "utf8mb4_general_ci"),
                                plan.Column("v", "int")), ("k",))


def test_keys_differing_only_in_case_or_trailing_spaces_delete_before_replace():
    """Under a _ci / PAD SPACE key, 'key1' = 'Key1' and 'a  ' = 'a': a DELETE of the extra
    row run after the REPLACE of the missing one would delete the row just written."""
    up = [_row("Key1", 1), _row("a", 2), _row("b", 3), _row("c", 4)]
    down = [_row("key1", 1), _row("a  ", 2), _row("b", 3), _row("c", 5)]
    diffs = plan.compare_keyed(CI, up, down)
    # paired by the key's bytes: the key column's difference is seen
    assert sorted((d.kind, d.key()) for d in diffs) == [
        ("changed", ("c",)), ("extra", ("a  ",)), ("extra", ("key1",)),
        ("missing", ("Key1",)), ("missing", ("a",))]
    sql = plan.render_fix_sql(diffs, lit)
    verbs = [s.split()[0] for s in sql]
    assert verbs == ["DELETE", "DELETE", "REPLACE", "REPLACE", "REPLACE"], sql
    assert set(sql[:2]) == {"DELETE FROM `db`.`c` WHERE `k` = 'key1'",
                            "DELETE FROM `db`.`c` WHERE `k` = 'a  '"}
    # keyless tables too, across tables: all deletes, then all writes
    both = plan.render_fix_sql(diffs + plan.compare_multiset(
        NOKEY, [_row(1, "A")], [_row(1, "A"), _row(1, "a")]), lit)
    kinds = [s.split()[0] for s in both]
    assert kinds == ["DELETE"] * 3 + ["REPLACE"] * 3, both
    assert "CAST(CONVERT(`s` USING utf8mb4) AS BINARY) <=> 'a' LIMIT 1" in both[2]


BINARY_TYPES = ("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob",
                "geometry", "point", "uuid", "inet6", "some_future_type")


def test_non_text_columns_are_compared_by_their_bytes():
    """CAST(b AS CHAR) maps bytes that are not utf8mb4 to '?' (x'41FE42' and x'41FF42'
    checksum the same) and passes through bytes Python cannot decode (ED A0 80): binary
    values are hashed, read and matched as HEX, never through a character cast."""
    for t in BINARY_TYPES:
        assert plan.column_expr(plan.Column("b", t)) == "HEX(`b`)", t
    assert plan.column_expr(plan.Column("b", "bit")) == "HEX(`b` + 0)"   # width-free
    for t in ("tinyint", "int", "bigint", "decimal", "date", "datetime", "time", "year"):
        assert plan.column_expr(plan.Column("n", t)) == "CAST(`n` AS CHAR)", t
    info = plan.TableInfo("db", "b", tuple(plan.Column(f"c{i}", t)
                                           for i, t in enumerate(BINARY_TYPES + ("bit",))),
                          ("c0",))
    for sql in (plan.row_hash_expr(info), plan.rows_sql(info, "TRUE"),
                plan.bucket_rows_sql(info, 4, [1])):
        assert "AS CHAR" not in sql, sql


def test_binary_values_are_hex_literals_in_the_fix_sql():
    from spark_on_ray.diff import literal

    assert literal(b"\x00\xff\xed\xa0\x80A") == "X'00FFEDA08041'"
    assert literal(b"") == "X''" and literal(bytearray(b"\x01")) == "X'01'"
    assert literal("it's") == "'it\\'s'" and literal(None) == "NULL"
    info = plan.TableInfo("db", "b", (plan.Column("id", "varbinary"),
                                      plan.Column("v", "longblob")), ("id",))
    row = (b"\xfe", b"A\xfeB", "FE", "41FE42")
    diffs = [plan.RowDiff(info, "missing", upstream=_split(row)),
             plan.RowDiff(info, "extra", downstream=_split((b"\xff", b"", "FF", "")))]
    assert plan.render_fix_sql(diffs, literal) == [
        "DELETE FROM `db`.`b` WHERE `id` = X'FF'",
        "REPLACE INTO `db`.`b` (`id`, `v`) VALUES (X'FE', X'41FE42')"]


def _split(row):
    return tuple(row[:len(row) // 2]), tuple(row[len(row) // 2:])


def test_spark_config_defaults_and_errors(tmp_path):
    cfg = load_spark_config(None)
    assert (cfg.spark.num_executors, cfg.spark.executor_cores, cfg.spark.executor_ray_cpus) == \
        (1, 4, 1.0)
    assert cfg.spark.executor_memory_bytes == 1 << 30 and cfg.diff.chunk_size == 50_000
    path = tmp_path / "spark.toml"
    path.write_text('[spark]\nexecutor-memory = "2 GiB"\n[diff]\ntables = ["shop", "a.b"]\n'
                    '[upstream]\nport = 4000\n')
    cfg = load_spark_config(path, {"diff.chunk-size": "1000"})
    assert cfg.spark.executor_memory_bytes == 2 << 30 and cfg.upstream.port == 4000
    assert cfg.diff.tables == ("shop", "a.b") and cfg.diff.chunk_size == 1000
    assert load_spark_config(path.write_text(cfg.to_toml()) and path) == cfg
    path.write_text("[spark]\nexecutors = 2\n")
    with pytest.raises(ConfigError, match=r"unknown key `spark.executors` in .*spark.toml"):
        load_spark_config(path)
    path.write_text('[diff]\ntables = ["a.b.c"]\n')
    with pytest.raises(ConfigError, match=r"`diff.tables`.*'a.b.c'"):
        load_spark_config(path)


def test_settle_verdict_tells_replication_in_flight_from_a_difference():
    a, b, c = {0: (3, "1", "2")}, {0: (3, "1", "9")}, {0: (4, "5", "6")}
    assert plan.settle_verdict(a, a, c) == "equal"        # downstream = upstream at T
    assert plan.settle_verdict(a, b, a) == "different"    # upstream still; downstream off
    assert plan.settle_verdict(a, c, c) == "moving"       # written during the round
    assert plan.settle_verdict(a, b, c) == "moving"


def test_diff_checkpoint_table_option(tmp_path):
    path = tmp_path / "spark.toml"
    path.write_text('[diff]\ncheckpoint-table = "tidb_binlog.checkpoint"\n')
    d = load_spark_config(path).diff
    assert (d.checkpoint_table, d.checkpoint_cluster_id, d.recheck_rounds) == \
        ("tidb_binlog.checkpoint", 0, 8)
    path.write_text('[diff]\ncheckpoint-table = "checkpoint"\n')
    with pytest.raises(ConfigError, match=r"`diff.checkpoint-table` .* 'checkpoint'; expected "
                       r"\"schema.table\""):
        load_spark_config(path)
