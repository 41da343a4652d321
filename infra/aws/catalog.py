"""The Glue database the lake's Delta tables are registered in (Athena, EMR and Spark SQL find them there)."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws


@dataclass(frozen=True)
class CatalogArgs:
    """Inputs of :class:`Catalog`. ``database_name`` uses letters, digits and underscores (Glue/Hive rule)."""

    database_name: str
    lake_bucket: pulumi.Input[str]


class Catalog(pulumi.ComponentResource):
    """A Glue database located at the lake bucket. Outputs: ``database_name``."""

    def __init__(self, name: str, args: CatalogArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("lakestack:aws:Catalog", name, None, opts)
        database = aws.glue.CatalogDatabase(
            f"{name}-database",
            name=args.database_name,
            description="lakestack Delta tables (bronze, silver, alerts)",
            location_uri=pulumi.Output.concat("s3://", args.lake_bucket, "/"),
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.database_name: pulumi.Output[str] = database.name
        self.register_outputs({"database_name": self.database_name})
