"""File formats beneath everything: TREC runs and qrels (:mod:`dapr.io.trec`), numbered rows of
JSON lines and parquet files with field checks (:mod:`dapr.io.rows`), corpus checks
(:mod:`dapr.io.checks`) and atomic writes (:mod:`dapr.io.files`). Dataset layouts live in
:mod:`dapr.datasets`."""

from __future__ import annotations

from dapr.io.rows import jsonl_rows
from dapr.io.trec import read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run

__all__ = ["jsonl_rows", "read_trec_qrels", "read_trec_run", "write_trec_qrels", "write_trec_run"]
