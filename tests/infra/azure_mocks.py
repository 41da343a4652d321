"""Run the Azure Pulumi program under the SDK's mocks and record every resource it declares (imported by the
Azure tests here; resources come back with ARM-shaped ids, the calls the program makes are answered)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pulumi
import yaml
from pulumi_mocks import JOB_FILES, RecordingMonitor, Resource, Run, fake_checkout

from infra.azure.deploy import SynapseArtifacts

SUBSCRIPTION = "00000000-0000-0000-0000-000000000001"
TENANT = "00000000-0000-0000-0000-0000000000aa"
DEPLOYER = "00000000-0000-0000-0000-0000000000dd"
WORKSPACE_PRINCIPAL = "00000000-0000-0000-0000-0000000000ee"
LISTEN_KEY = (
    "Endpoint=sb://mock/;SharedAccessKeyName=listen;SharedAccessKey=LISTENSECRETKEY=;EntityPath=events"
)
SEND_KEY = "Endpoint=sb://mock/;SharedAccessKeyName=send;SharedAccessKey=SENDSECRETKEY=;EntityPath=events"
RG = f"/subscriptions/{SUBSCRIPTION}/resourceGroups"
# Where each resource type sits under its resource group, and the input that names it.
_PATHS: dict[str, tuple[str, str]] = {
    "azure-native:storage:StorageAccount": ("Microsoft.Storage/storageAccounts/{}", "accountName"),
    "azure-native:storage:BlobContainer": (
        "Microsoft.Storage/storageAccounts/{accountName}/blobServices/default/containers/{}",
        "containerName",
    ),
    "azure-native:eventhub:Namespace": ("Microsoft.EventHub/namespaces/{}", "namespaceName"),
    "azure-native:eventhub:EventHub": (
        "Microsoft.EventHub/namespaces/{namespaceName}/eventhubs/{}",
        "eventHubName",
    ),
    "azure-native:keyvault:Vault": ("Microsoft.KeyVault/vaults/{}", "vaultName"),
    "azure-native:keyvault:Secret": ("Microsoft.KeyVault/vaults/{vaultName}/secrets/{}", "secretName"),
    "azure-native:synapse:Workspace": ("Microsoft.Synapse/workspaces/{}", "workspaceName"),
    "azure-native:synapse:BigDataPool": (
        "Microsoft.Synapse/workspaces/{workspaceName}/bigDataPools/{}",
        "bigDataPoolName",
    ),
    "azure-native:operationalinsights:Workspace": (
        "Microsoft.OperationalInsights/workspaces/{}",
        "workspaceName",
    ),
}


class AzureMocks(pulumi.runtime.Mocks):
    def __init__(self, run: Run) -> None:
        self.run = run

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        self.run.resources.append(Resource(args.typ, args.name, dict(args.inputs)))
        inputs = dict(args.inputs)
        outs = dict(inputs)
        if args.typ == "azure-native:keyvault:Vault":
            # The vault is autonamed: Pulumi adds a random suffix to the resource name.
            inputs.setdefault("vaultName", f"{args.name}1a2b3c")
            outs["properties"] = {**inputs["properties"], "vaultUri": "https://mock.vault.azure.net/"}
        if args.typ == "azure-native:resources:ResourceGroup":
            outs["name"] = inputs["resourceGroupName"]
            return f"{RG}/{inputs['resourceGroupName']}", outs
        if args.typ in _PATHS:
            pattern, key = _PATHS[args.typ]
            outs["name"] = inputs[key]
            rid = f"{RG}/{inputs['resourceGroupName']}/providers/" + pattern.format(inputs[key], **inputs)
            if args.typ == "azure-native:synapse:Workspace":
                outs["identity"] = {
                    "principalId": WORKSPACE_PRINCIPAL,
                    "tenantId": TENANT,
                    "type": "SystemAssigned",
                }
                outs["connectivityEndpoints"] = {
                    "dev": f"https://{inputs['workspaceName']}.dev.azuresynapse.net"
                }
            if args.typ == "azure-native:operationalinsights:Workspace":
                outs["customerId"] = "log-customer-id"
            return rid, outs
        if args.typ == "azure-native:eventhub:EventHubAuthorizationRule":
            outs["name"] = inputs["authorizationRuleName"]
        return f"{args.name}-id", outs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        if args.token == "azure-native:authorization:getClientConfig":
            return {
                "clientId": "client",
                "objectId": DEPLOYER,
                "subscriptionId": SUBSCRIPTION,
                "tenantId": TENANT,
            }
        if args.token == "azure-native:eventhub:listEventHubKeys":
            key = LISTEN_KEY if args.args["authorizationRuleName"] == "listen" else SEND_KEY
            return {"primaryConnectionString": key, "keyName": args.args["authorizationRuleName"]}
        raise AssertionError(f"unexpected call {args.token}")


def fake_synapse_artifacts(tmp_path: Path, content_hash: str = "0123456789abcdef") -> SynapseArtifacts:
    files = tmp_path / "synapse-artifacts"
    files.mkdir(exist_ok=True)
    wheel = files / "lakestack_jobs-0.1.0-py3-none-any.whl"
    launcher = files / "run_job.py"
    for path in (wheel, launcher):
        path.write_bytes(b"x")
    return SynapseArtifacts(content_hash, wheel, launcher)


def execute_azure_program(
    config: dict[str, Any],
    *,
    tmp_path: Path,
    stack: str = "azure-dev",
    artifacts: SynapseArtifacts | None = None,
    run: Run | None = None,
    job_files: tuple[str, ...] = JOB_FILES,
) -> Run:
    """Run ``infra.program.main`` (which hands over to the Azure program) under mocks, deploying a checkout
    that has ``job_files``."""
    from infra import program
    from infra.azure import program as azure_program

    recorded = run if run is not None else Run()
    mocks = AzureMocks(recorded)
    # The recording monitor also keeps what the engine is told beyond inputs (dependencies, ignoreChanges).
    pulumi.runtime.set_mocks(
        mocks,
        project="lakestack",
        stack=stack,
        preview=False,
        monitor=RecordingMonitor(mocks),  # type: ignore[arg-type]
    )
    pulumi.runtime.set_all_config({k: v if isinstance(v, str) else json.dumps(v) for k, v in config.items()})
    project = tmp_path / "project"
    project.mkdir(exist_ok=True)
    (project / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}))
    inputs = azure_program.PoolInputs(
        artifacts=artifacts or fake_synapse_artifacts(tmp_path),
        requirements="deltalake==1.6.6\npyarrow==21.0.0\n",
    )
    checkout = fake_checkout(tmp_path / "checkout", job_files)
    exported: dict[str, Any] = {}

    @pulumi.runtime.test
    def program_run():
        program.main(project_dir=project, source_dir=checkout)
        return pulumi.Output.from_input(exported).apply(recorded.exports.update)

    with (
        mock.patch.object(pulumi, "export", lambda name, value: exported.__setitem__(name, value)),
        mock.patch.object(azure_program, "build_pool_inputs", lambda _settings: inputs),
    ):
        program_run()
    return recorded
