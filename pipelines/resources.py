"""Dagster resources: the statistics DB, the fleet (provider + Pipes channel), paths."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Literal

from dagster import ConfigurableResource
from pydantic import Field

from infra.db.session import db_url, make_engine, upgrade

_MIGRATED: set[str] = set()


class StatsDB(ConfigurableResource):
    """The statistics database. ``url`` empty: ``$SPOTFLEET_DB_URL`` or ``<var_dir>/spotfleet.db``."""

    url: str = ""
    var_dir: str = ""

    def resolved_url(self) -> str:
        return db_url(self.url or None, self.var_dir or None)

    def engine(self):
        """An engine on a database migrated to the newest schema."""
        url = self.resolved_url()
        eng = make_engine(url)
        if url not in _MIGRATED:
            upgrade(eng)
            _MIGRATED.add(url)
        return eng


class FleetResource(ConfigurableResource):
    """Where training stages run and how their events come back (Dagster Pipes).

    ``pipes_channel``: ``subprocess`` (local fleet: the node runner is a local child
    process, messages over a temp file) or ``s3`` (remote nodes: context and messages
    through ``s3://<pipes_bucket>``; endpoint from ``pipes_endpoint_url`` or
    ``AWS_ENDPOINT_URL``).
    """

    provider: Literal["auto", "local", "skypilot"] = Field(
        "auto", description="auto: each pipeline's 'provider' field")
    work_dir: str = Field("", description="per-stage scratch (events files); default <var_dir>/fleet")
    var_dir: str = ""
    python: str = Field("", description="interpreter for node runner and scripts; default this one")
    pipes_channel: Literal["subprocess", "s3"] = "subprocess"
    pipes_bucket: str = ""
    pipes_endpoint_url: str = ""
    pipes_poll_seconds: float = 1.0
    project_dir: str = Field("", description="cwd of training processes; default the current dir")

    def var_path(self) -> Path:
        return Path(self.var_dir or os.environ.get("SPOTFLEET_VAR_DIR") or "var").resolve()

    def work_path(self) -> Path:
        p = Path(self.work_dir).resolve() if self.work_dir else self.var_path() / "fleet"
        p.mkdir(parents=True, exist_ok=True)
        return p

    def market_cache_dir(self) -> Path:
        """Where the pipeline's generated synthetic market is kept for the steps and node
        runners of its runs (``MarketConfig.traces(cache_dir=...)``)."""
        return self.work_path() / "market-cache"

    def python_exe(self) -> str:
        return self.python or sys.executable

    def cwd(self) -> str:
        return str(Path(self.project_dir).resolve()) if self.project_dir else os.getcwd()

    def s3_client(self):
        import boto3

        endpoint = self.pipes_endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
        return boto3.client("s3", endpoint_url=endpoint,
                            region_name=os.environ.get("AWS_DEFAULT_REGION", "us-east-1"))

    def pipes_client(self):
        """A ``PipesSubprocessClient`` (``StagePipesClient``: a terminated run keeps what the
        node runner reported) with the configured message channel."""
        from pipelines.pipes_client import StagePipesClient

        if self.pipes_channel == "s3":
            if not self.pipes_bucket:
                raise ValueError("fleet.pipes_channel is 's3' but fleet.pipes_bucket is empty; "
                                 "set it to a bucket the nodes can write to")
            from dagster_aws.pipes import PipesS3ContextInjector, PipesS3MessageReader

            client = self.s3_client()
            return StagePipesClient(
                cwd=self.cwd(),
                context_injector=PipesS3ContextInjector(bucket=self.pipes_bucket, client=client),
                message_reader=_single_writer(PipesS3MessageReader)(
                    bucket=self.pipes_bucket, client=client, interval=self.pipes_poll_seconds),
            )
        from dagster import PipesTempFileMessageReader

        return StagePipesClient(cwd=self.cwd(), message_reader=_single_writer(PipesTempFileMessageReader)())


@functools.cache
def _single_writer(reader_cls: type) -> type:
    """``reader_cls`` with a plain ``expected_writer_count = 1`` (one node runner writes).

    Dagster 1.13's ``PipesMessageHandler`` reads the reader's ``expected_writer_count``
    when every Pipes session opens; on the stock readers that property is marked
    ``@preview``, so each stage attempt printed the same ``PreviewWarning`` (three times in
    the main job). Our readers have exactly one writer, the default the property returns;
    defining it here as an ordinary attribute gives Dagster the same value without the
    preview API call, so there is nothing to warn about.
    """
    return type(reader_cls.__name__, (reader_cls,), {
        "__module__": __name__, "__doc__": reader_cls.__doc__,
        "expected_writer_count": property(lambda self: 1)})
