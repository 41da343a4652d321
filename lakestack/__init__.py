"""lakestack, the developer tool: the `lakestack` command, the embedded emulator, the demo, stack control
(Pulumi Automation API), reconciliation and run reports. It drives `infra`, `jobs` and `loadtest`; nothing
imports it."""
