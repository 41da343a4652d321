"""The `lakestack` subcommands, one module each; every module has ``register(subparsers)``."""
