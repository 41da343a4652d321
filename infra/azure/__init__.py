"""Azure component resources of the lakestack program (Synapse Spark 3.5, Event Hubs, ADLS Gen2), its settings,
price table and the dynamic providers that reach what pulumi-azure-native has no resource for."""
