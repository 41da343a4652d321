"""The Glue database the lake's Delta tables are registered in, so Athena (and other Glue-catalog engines) can
query them by name.

Each table is registered as Athena's native Delta Lake tables are (``table_type = DELTA`` and a location, no
columns): Athena reads the schema and the current snapshot from the table's ``_delta_log`` at query time, so the
registration never goes stale and can exist before the pipeline's first commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class CatalogArgs:
    """Inputs of :class:`Catalog`. ``database_name`` uses letters, digits and underscores (Glue/Hive rule);
    ``tables`` maps a table name to its path under the lake bucket."""

    database_name: str
    lake_bucket: pulumi.Input[str]
    tables: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


class Catalog(pulumi.ComponentResource):
    """A Glue database located at the lake bucket, with one Delta table per pipeline table.

    Outputs: ``database_name``, ``table_uris`` (table name -> ``s3://`` location).
    """

    def __init__(self, name: str, args: CatalogArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Catalog", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        database = aws.glue.CatalogDatabase(
            f"{name}-database",
            name=args.database_name,
            description="lakestack Delta tables (bronze, silver, gold, quarantine)",
            location_uri=pulumi.Output.concat("s3://", args.lake_bucket, "/"),
            tags=dict(args.tags),
            opts=child,
        )
        table_uris: dict[str, pulumi.Output[str]] = {}
        for table, path in args.tables.items():
            location = pulumi.Output.concat("s3://", args.lake_bucket, f"/{path}")
            aws.glue.CatalogTable(
                f"{name}-{table.replace('_', '-')}",
                name=table,
                database_name=database.name,
                table_type="EXTERNAL_TABLE",
                parameters={"table_type": "DELTA", "EXTERNAL": "TRUE"},
                storage_descriptor={"location": location},
                opts=child,
            )
            table_uris[table] = location
        self.database_name: pulumi.Output[str] = database.name
        self.table_uris = table_uris
        self.register_outputs({"database_name": self.database_name, "table_uris": table_uris})
