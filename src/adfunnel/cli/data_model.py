"""The served log and the models: ``adfunnel events query`` and ``adfunnel model
train | evaluate | ope | shading-fit``."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from adfunnel.cli.console import console, first_line

events_app = typer.Typer(help="The served log: SQL over its hourly Parquet files.")
model_app = typer.Typer(help="The click model: train and evaluate (hashed logistic regression, "
                        "isotonic calibration); first-price shading's win curves.")


@events_app.command("query")
def events_query(
    sql: Annotated[str, typer.Argument(help="DuckDB SQL over the view `served` (one row per decision).")],
    directory: Annotated[Path, typer.Option("--dir", help="The served log's directory (serve --served-log).")] = Path("served-log"),
    compact_first: Annotated[bool, typer.Option(help="Compact closed hours into Parquet first.")] = True,
    output: Annotated[str, typer.Option(help="table, csv or json.")] = "table",
) -> None:
    """Run SQL over the served log, e.g. `adfunnel events query "select count(*) from served"`."""
    import duckdb

    from adfunnel.events.compactor import compact
    from adfunnel.learn.query import query_table

    if output not in ("table", "csv", "json"):
        console.print("[red]--output must be table, csv or json[/red]")
        raise typer.Exit(2)
    if not directory.is_dir():
        console.print(f"[red]no served log at {directory}[/red]")
        raise typer.Exit(2)
    if compact_first:
        compact(directory, datetime.now(UTC))
    try:
        table = query_table(directory, sql)
    except duckdb.Error as exc:
        console.print(f"[red]{first_line(exc)}[/red]")
        raise typer.Exit(2) from None
    rows = table.to_pylist()
    if output == "json":
        print(json.dumps(rows, default=str))
    elif output == "csv":
        import csv
        import sys

        writer = csv.DictWriter(sys.stdout, fieldnames=table.column_names)
        writer.writeheader()
        writer.writerows(rows)
    else:
        out = Table(*table.column_names)
        for r in rows:
            out.add_row(*(str(v) for v in r.values()))
        console.print(out)


DATASET_HELP = "served-log (a served log directory, with --database-url), criteo or avazu."


@model_app.command("train")
def model_train(
    dataset: Annotated[str, typer.Option(help=DATASET_HELP)],
    input_path: Annotated[Path, typer.Option("--input", help="The dataset's file (served-log: its directory).")],
    out: Annotated[Path, typer.Option(help="Directory the model artifact is written to.")],
    database_url: Annotated[str | None, typer.Option(help="The ledger to join a served log with.", show_default="none")] = None,
    hash_bits: Annotated[int, typer.Option(help="Hashed feature columns: 2**hash_bits.")] = 18,
    c: Annotated[float, typer.Option("--c", help="Inverse L2 regularisation strength.")] = 0.1,
    seed: Annotated[int, typer.Option(help="Seed of the 80/20 training/held-out split.")] = 7,
    current: Annotated[Path | None, typer.Option(help="The model in use: refuse the new one when its normalised entropy on the held-out slice is worse.", show_default="none")] = None,
    target: Annotated[str, typer.Option(help="click (pCTR of impressions) or conversion (pCVR of clicks; served-log only).")] = "click",
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the held-out figures here.", show_default="none")] = None,
) -> None:
    """Train, calibrate and measure a click model; write the artifact to --out."""
    from adfunnel.learn import datasets
    from adfunnel.learn.train import check_not_worse, train
    from adfunnel.prediction import model

    if not 10 <= hash_bits <= 24 or c <= 0:
        console.print("[red]--hash-bits must be in 10..24 and --c > 0[/red]")
        raise typer.Exit(2)
    try:
        examples = datasets.load(dataset, input_path, database_url=database_url,
                                 target=target)
        trained = train(examples, dataset, hash_bits=hash_bits, c=c, seed=seed,
                        target=target)
        if current is not None:
            check_not_worse(trained, model.ClickModel.load(current))
    except (datasets.DatasetError, model.ModelError, OSError) as exc:
        console.print(f"[red]{first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    trained.model.save(out)
    _emit({"version": trained.model.version, "out": str(out), **trained.model.metrics},
          json_path)


@model_app.command("evaluate")
def model_evaluate(
    model_dir: Annotated[Path, typer.Option("--model", help="A model artifact directory.")],
    dataset: Annotated[str, typer.Option(help=DATASET_HELP)],
    input_path: Annotated[Path, typer.Option("--input", help="The dataset's file (served-log: its directory).")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the figures here.", show_default="none")] = None,
    database_url: Annotated[str | None, typer.Option(help="The ledger to join a served log with.", show_default="none")] = None,
) -> None:
    """Evaluate a model on every row of a dataset: rows, log_loss, normalized_entropy,
    calibration_ratio (Σ predicted / Σ observed), auc."""
    from adfunnel.learn import datasets
    from adfunnel.learn.metrics import evaluate
    from adfunnel.prediction import model

    try:
        loaded = model.ClickModel.load(model_dir)
        examples = datasets.load(dataset, input_path, database_url=database_url)
    except (datasets.DatasetError, model.ModelError, OSError) as exc:
        console.print(f"[red]{first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    _emit(evaluate(examples.labels, loaded.predict(examples.tokens)), json_path)


@model_app.command("ope")
def model_ope(
    logged: Annotated[Path, typer.Option(help="The logged decisions: a served log directory, or an Open Bandit Dataset CSV.")],
    format_: Annotated[str, typer.Option("--format", help="served-log or obd.")],
    target_policy: Annotated[Path, typer.Option(help="CSV item_id,position,probability (summing to 1 per position).")],
    json_path: Annotated[Path | None, typer.Option("--json", help="Write the estimates here.", show_default="none")] = None,
    database_url: Annotated[str | None, typer.Option(help="The ledger a served log is joined with (its clicks).", show_default="none")] = None,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap and the cross-fitting folds.")] = 7,
) -> None:
    """Estimate a target policy's click rate from logged decisions: IPS, SNIPS and doubly
    robust, each with a 95 % bootstrap interval."""
    from adfunnel.learn import ope

    if format_ not in ope.FORMATS:
        console.print(f"[red]--format must be one of {', '.join(ope.FORMATS)}[/red]")
        raise typer.Exit(2)
    try:
        policy = ope.load_policy(target_policy)
        if format_ == "obd":
            rows, left_out = ope.load_obd(logged), 0
        elif database_url is None:
            console.print("[red]--format served-log needs --database-url (the ledger)[/red]")
            raise typer.Exit(2)
        else:
            rows, left_out = ope.load_served(logged, database_url)
        result = ope.estimate(rows, policy, seed=seed)
    except (ope.OpeError, OSError) as exc:
        console.print(f"[red]{first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    if format_ == "served-log":
        result["left_out_without_propensity"] = left_out
    _emit(result, json_path)


@model_app.command("shading-fit")
def model_shading_fit(
    input_path: Annotated[Path, typer.Option("--input", help="The served log's directory (serve --served-log).")],
    out: Annotated[Path, typer.Option(help="Directory the shading release is written to.")],
    days: Annotated[float, typer.Option(help="The window: the served log's last DAYS days (UTC, up to now).")] = 7.0,
    min_observations: Annotated[int, typer.Option(help="Segments with fewer prices back off to coarser ones.")] = 200,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the release's figures here.", show_default="none")] = None,
    database_url: Annotated[str | None, typer.Option(help="The ledger whose OpenRTB win and loss notices give the prices to beat of our exchange bids.", show_default="none")] = None,
) -> None:
    """Fit first-price shading's win curves (per placement × slot size × hour, with
    back-off) from the served log's prices to beat (an exchange's win and loss notices
    in the ledger at --database-url where given); write a shading release to --out
    (register it with POST /v1/admin/models to serve with it)."""
    from datetime import timedelta

    from sqlalchemy.exc import SQLAlchemyError

    from adfunnel.db import make_engine
    from adfunnel.events.compactor import compact
    from adfunnel.learn.shading_fit import NoObservations, fit_release, notice_prices

    if days <= 0 or min_observations < 1:
        console.print("[red]--days must be > 0 and --min-observations >= 1[/red]")
        raise typer.Exit(2)
    if not input_path.is_dir():
        console.print(f"[red]no served log at {input_path}[/red]")
        raise typer.Exit(2)
    now = datetime.now(UTC)
    since = now - timedelta(days=days)
    try:
        notices = None
        if database_url is not None:
            engine = make_engine(database_url)
            try:
                notices = notice_prices(engine, since)
            finally:
                engine.dispose()
        compact(input_path, now)
        release = fit_release(input_path, since, now, min_observations=min_observations,
                              notices=notices)
        release.save(out)
    except (NoObservations, OSError, SQLAlchemyError) as exc:
        console.print(f"[red]{first_line(exc)}[/red]")
        raise typer.Exit(1) from None
    _emit({"version": release.version, "out": str(out), **release.metrics}, json_path)


def _emit(result: dict, json_path: Path | None) -> None:
    if json_path is not None:
        json_path.write_text(json.dumps(result, indent=2))
    console.print_json(json.dumps(result))
