"""The report's numbers as SQL over every run's rows (views ``ext``, ``pos``, ``pk``, ``met``,
``tasks`` of ``posx.report.store.cache``, and ``runs``: each counted run's group, seed, parent and
encoding), one row per group and cell: the engine streams the rows, so memory follows the groups,
not the runs. Learned absolute rows scored past the table read as methods ``clamp`` and
``interpolate``, an extended run's rows as ``<method> (<stage>)``.
"""

from __future__ import annotations

import pandas as pd

from posx.eval.tables import TASK_COLUMNS

SUMMARY_KEYS = ["group", "parent", "encoding", "method", "protocol", "factor"]
PASSKEY_KEYS = ["group", "encoding", "method", "variant", "factor"]
BEYOND = (
    "CASE WHEN t.pos = 'absolute' AND t.method = 'none' AND COALESCE(t.absolute_beyond, 'none') NOT IN ('none', '') "
    "THEN t.absolute_beyond ELSE t.method END"
)
STAGED = f"{BEYOND} || CASE WHEN r.parent <> '' THEN ' (' || t.stage || ')' ELSE '' END"


def _joined(column: str, where: str = "") -> str:
    """The distinct values of ``column``, sorted, joined by commas ('' when none)."""
    only = f" FILTER (WHERE {where})" if where else ""
    return f"COALESCE(array_to_string(list_sort(list_distinct(list({column}){only})), ','), '')"


def _statuses(keys: list[str], rows: str, count: str = "count(*)") -> str:
    """Per key, 'ok' when every row is ok, else 'status n, ...' (most frequent first)."""
    k = ", ".join(f'"{c}"' for c in keys)
    return (
        f"SELECT {k}, CASE WHEN bool_and(status = 'ok') THEN 'ok' ELSE "
        f"string_agg(status || ' ' || n, ', ' ORDER BY n DESC, status) END AS status "
        f"FROM (SELECT {k}, COALESCE(status, '') AS status, {count} AS n FROM {rows} GROUP BY ALL) GROUP BY ALL"
    )


def extrapolation_rows(con) -> None:
    """The view ``ext_rows``: every counted run's extrapolation rows with its group, seed, parent."""
    con.execute(
        'CREATE OR REPLACE TEMP VIEW ext_rows AS SELECT r."group", r.parent, t.pos AS encoding, '
        f"{STAGED} AS method, t.protocol, t.factor, t.train_context, t.eval_context, t.ppl, t.ppl_lo, t.ppl_hi, "
        "t.status, t.bpb, r.seed, t.run AS run_dir FROM ext t JOIN runs r ON t.run = r.run"
    )


def summary(con) -> pd.DataFrame:
    keys = ", ".join(f'"{c}"' for c in SUMMARY_KEYS)
    ok = "status = 'ok'"
    return con.execute(
        f"WITH cells AS (SELECT {keys}, {_joined('train_context')} AS train_context, "
        f"{_joined('eval_context')} AS eval_context, avg(ppl) FILTER (WHERE {ok}) AS ppl_mean, "
        f"stddev_samp(ppl) FILTER (WHERE {ok}) AS ppl_std, avg(bpb) FILTER (WHERE {ok}) AS bpb_mean, "
        f"count(*) FILTER (WHERE {ok}) AS n_seeds, "
        f"any_value(ppl_lo) FILTER (WHERE {ok}) AS one_lo, any_value(ppl_hi) FILTER (WHERE {ok}) AS one_hi, "
        f"{_joined('seed', ok)} AS seeds FROM ext_rows GROUP BY ALL), "
        f"st AS ({_statuses(SUMMARY_KEYS, 'ext_rows')}) "
        f"SELECT * FROM cells JOIN st USING ({keys}) ORDER BY {keys}"
    ).df()


def passkey(con) -> pd.DataFrame:
    """Accuracy over all depths per run, then mean and sample std over runs; its statuses count runs."""
    keys = ", ".join(f'"{c}"' for c in PASSKEY_KEYS)
    return con.execute(
        f'WITH rows AS (SELECT r."group", t.pos AS encoding, {BEYOND} AS method, t.variant, t.factor, t.run, '
        "t.status, t.accuracy, t.trials, t.key_nll FROM pk t JOIN runs r ON t.run = r.run), "
        f"per_run AS (SELECT {keys}, run, sum(accuracy * trials) AS hits, sum(trials) AS trials, "
        "sum(key_nll * trials) AS nll_sum FROM rows WHERE status = 'ok' GROUP BY ALL), "
        f"stats AS (SELECT {keys}, avg(hits / trials) AS accuracy_mean, stddev_samp(hits / trials) AS accuracy_std, "
        f"avg(nll_sum / trials) AS key_nll_mean, {_joined('trials')} AS trials_per_run, count(*) AS n_seeds "
        "FROM per_run GROUP BY ALL), "
        f"st AS ({_statuses(PASSKEY_KEYS, 'rows', 'count(DISTINCT run)')}) "
        f"SELECT {keys}, accuracy_mean, accuracy_std, key_nll_mean, trials_per_run, "
        f"COALESCE(n_seeds, 0) AS n_seeds, status FROM st LEFT JOIN stats USING ({keys}) ORDER BY {keys}"
    ).df()


def positions(con) -> pd.DataFrame:
    """Mean NLL (and its std over runs) per group x parent x encoding x method x protocol x factor x position."""
    return con.execute(
        'SELECT r."group", r.parent, t.pos AS encoding, '
        f"{STAGED} AS method, t.protocol, t.factor, "
        "(t.bucket_start + t.bucket_end) / 2 / t.train_context AS x, min(t.train_context) AS train_context, "
        "avg(t.nll) AS nll, stddev_samp(t.nll) AS nll_std, count(*) AS n "
        "FROM pos t JOIN runs r ON t.run = r.run GROUP BY ALL ORDER BY ALL"
    ).df()


def longest_factor(con) -> float | None:
    """The longest factor a trained run has per-position rows at (non-overlapping windows)."""
    found = con.execute(
        "SELECT max(longest) FROM (SELECT t.run, max(t.factor) AS longest FROM pos t JOIN runs r ON t.run = r.run "
        "WHERE r.parent = '' AND t.protocol = 'nonoverlapping' GROUP BY t.run)"
    ).fetchone()[0]
    return None if found is None else float(found)


def training(con) -> pd.DataFrame:
    """Train and val loss (mean, std) and val ppl exp(val_loss) (mean, std, n) per group x step."""
    return con.execute(
        'SELECT r."group", r.parent, r.encoding, t.step, avg(t.train_loss) AS train_loss, '
        "stddev_samp(t.train_loss) AS train_std, avg(t.val_loss) AS val_loss, stddev_samp(t.val_loss) AS val_std, "
        "avg(exp(t.val_loss)) AS val_ppl, stddev_samp(exp(t.val_loss)) AS val_ppl_std, count(t.val_loss) AS val_n, "
        "count(*) AS n FROM met t JOIN runs r ON t.run = r.run WHERE t.step IS NOT NULL GROUP BY ALL ORDER BY ALL"
    ).df()


def tasks(con) -> pd.DataFrame:
    """Every counted run's tasks.csv rows with its ``run_dir``, group, seed, parent and ``encoding``."""
    columns = ", ".join(f't."{c}"' for c in TASK_COLUMNS if c not in ("run", "pos"))
    return con.execute(
        f'SELECT r.run AS run_dir, r."group", r.seed, r.parent, t.pos AS encoding, {columns} '
        "FROM tasks t JOIN runs r ON t.run = r.run"
    ).df()
