"""The Azure program for the azure-dev stack, under Pulumi's mocks: every security setting, the sizing, the
role assignments, the job deployment and the outputs."""

from __future__ import annotations

import pytest
from azure_mocks import (
    DEPLOYER,
    LISTEN_KEY,
    RG,
    SEND_KEY,
    SUBSCRIPTION,
    TENANT,
    WORKSPACE_PRINCIPAL,
    execute_azure_program,
    fake_synapse_artifacts,
)
from pulumi_mocks import Run, stack_config

from infra.errors import ConfigError, NotBuiltError

ALLOWED = ["198.51.100.7/32", "203.0.113.0/28"]
GROUP = f"{RG}/lakestack-azdev-rg"
ACCOUNT_ID = f"{GROUP}/providers/Microsoft.Storage/storageAccounts/lakestackazdev"
WORKSPACE_ID = f"{GROUP}/providers/Microsoft.Synapse/workspaces/lakestack-azdev"
POOL_ID = f"{WORKSPACE_ID}/bigDataPools/lakestack"
NAMESPACE_ID = f"{GROUP}/providers/Microsoft.EventHub/namespaces/lakestack-azdev-events"
VAULT_ID = f"{GROUP}/providers/Microsoft.KeyVault/vaults/secrets-vault1a2b3c"


# How the SDK marks a secret value on the wire (pulumi.runtime.rpc's secret signature).
SECRET_SIG = ("4dabf18193072939515e22adb298388d", "1b47061264138c4ac30d75fd1eb44270")


def secret_value(value):
    assert isinstance(value, dict) and value.get(SECRET_SIG[0]) == SECRET_SIG[1], f"not a secret: {value!r}"
    return value["value"]


def container(role: str) -> str:
    return f"{ACCOUNT_ID}/blobServices/default/containers/{role}"


def role(guid: str) -> str:
    return f"/subscriptions/{SUBSCRIPTION}/providers/Microsoft.Authorization/roleDefinitions/{guid}"


def azure_dev(**overrides):
    config = {
        **stack_config("azure-dev"),
        "lakestack:network": {"allowedIpRanges": ALLOWED},
        "lakestack:expiresAt": "2026-12-01T18:00:00Z",
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def dev(tmp_path_factory):
    # One run shared by the read-only assertions below.
    return execute_azure_program(azure_dev(), tmp_path=tmp_path_factory.mktemp("azure-dev"))


def test_exports_the_outputs_and_no_secret(dev):
    assert dev.exports == {
        "expires_at": "2026-12-01T18:00:00Z",
        "region": "eastus",
        "resource_group": "lakestack-azdev-rg",
        "stream_name": "events",
        "eventhubs_namespace": "lakestack-azdev-events",
        "kafka_bootstrap": "lakestack-azdev-events.servicebus.windows.net:9093",
        "storage_account": "lakestackazdev",
        "lake_uri": "abfss://lake@lakestackazdev.dfs.core.windows.net/",
        "checkpoint_uri": "abfss://checkpoints@lakestackazdev.dfs.core.windows.net/",
        "table_uri": "abfss://lake@lakestackazdev.dfs.core.windows.net/bronze/events",
        "key_vault_name": "secrets-vault1a2b3c",
        "listen_secret_name": "eventhubs-listen",
        "send_secret_name": "eventhubs-send",
        "workspace_name": "lakestack-azdev",
        "workspace_dev_endpoint": "https://lakestack-azdev.dev.azuresynapse.net",
        "cluster_id": POOL_ID,
        "log_workspace_id": f"{GROUP}/providers/Microsoft.OperationalInsights/workspaces/lakestack-azdev-logs",
        "pipelines": {
            "ingest": {
                "lake": "abfss://lake@lakestackazdev.dfs.core.windows.net",
                "checkpoint": "abfss://checkpoints@lakestackazdev.dfs.core.windows.net/ingest/events",
            }
        },
        # The provider's output once `pulumi up` has run the job (the mocks run none).
        "batch_ids": {"ingest": None},
    }
    assert "SharedAccessKey" not in repr(dev.exports)


def test_every_taggable_resource_carries_the_stack_tags_with_the_expiry(dev):
    stack_tags = {
        "lakestack:project": "lakestack",
        "lakestack:stack": "azure-dev",
        "lakestack:expires-at": "2026-12-01T18:00:00Z",
    }
    tagged = [r for r in dev.resources if r.typ.startswith("azure-native:") and "tags" in r.inputs]
    assert {r.typ for r in tagged} >= {
        "azure-native:resources:ResourceGroup",
        "azure-native:storage:StorageAccount",
        "azure-native:eventhub:Namespace",
        "azure-native:keyvault:Vault",
        "azure-native:synapse:Workspace",
        "azure-native:synapse:BigDataPool",
        "azure-native:operationalinsights:Workspace",
    }
    for resource in tagged:
        assert resource.inputs["tags"] == stack_tags, resource.name


def test_storage_account_is_private_tls12_entra_only_and_firewalled(dev):
    account = dev.one("azure-native:storage:StorageAccount").inputs
    assert {k: account[k] for k in account if k not in ("networkRuleSet", "encryption", "tags")} == {
        "accountName": "lakestackazdev",
        "resourceGroupName": "lakestack-azdev-rg",
        "location": "eastus",
        "kind": "StorageV2",
        "sku": {"name": "Standard_LRS"},
        "accessTier": "Hot",
        "isHnsEnabled": True,
        "minimumTlsVersion": "TLS1_2",
        "enableHttpsTrafficOnly": True,
        "allowBlobPublicAccess": False,
        "allowSharedKeyAccess": False,
        "defaultToOAuthAuthentication": True,
        "allowCrossTenantReplication": False,
        "isLocalUserEnabled": False,
        "isSftpEnabled": False,
    }
    assert account["networkRuleSet"] == {
        "defaultAction": "Deny",
        "bypass": "AzureServices, Logging, Metrics",
        # A single address goes in without its /32: storage IP rules refuse /31 and /32 prefixes.
        "ipRules": [
            {"iPAddressOrRange": "198.51.100.7", "action": "Allow"},
            {"iPAddressOrRange": "203.0.113.0/28", "action": "Allow"},
        ],
        "resourceAccessRules": [{"tenantId": TENANT, "resourceId": WORKSPACE_ID}],
    }
    assert account["encryption"] == {
        "keySource": "Microsoft.Storage",
        "requireInfrastructureEncryption": True,
        "services": {
            "blob": {"enabled": True, "keyType": "Account"},
            "file": {"enabled": True, "keyType": "Account"},
        },
    }


def test_soft_delete_filesystems_and_log_expiry(dev):
    service = dev.one("azure-native:storage:BlobServiceProperties").inputs
    assert service["deleteRetentionPolicy"] == {"enabled": True, "days": 7}
    assert service["containerDeleteRetentionPolicy"] == {"enabled": True, "days": 7}
    # Blob versioning is not available on a hierarchical namespace: it must not be asked for.
    assert "isVersioningEnabled" not in service
    containers = {
        c.inputs["containerName"]: c.inputs["publicAccess"]
        for c in dev.of_type("azure-native:storage:BlobContainer")
    }
    assert containers == {role: "None" for role in ("lake", "checkpoints", "artifacts", "logs", "workspace")}
    (rule,) = dev.one("azure-native:storage:ManagementPolicy").inputs["policy"]["rules"]
    assert rule["definition"] == {
        "filters": {"blobTypes": ["blockBlob"], "prefixMatch": ["logs/"]},
        "actions": {"baseBlob": {"delete": {"daysAfterModificationGreaterThan": 90}}},
    }


def test_event_hubs_namespace_hub_and_scoped_rules(dev):
    namespace = dev.one("azure-native:eventhub:Namespace").inputs
    assert namespace["sku"] == {"name": "Standard", "tier": "Standard", "capacity": 2}
    assert (namespace["isAutoInflateEnabled"], namespace["maximumThroughputUnits"]) == (True, 4)
    assert namespace["minimumTlsVersion"] == "1.2"
    assert namespace["disableLocalAuth"] is False
    network = dev.one("azure-native:eventhub:NamespaceNetworkRuleSet").inputs
    assert network["defaultAction"] == "Deny"
    assert network["ipRules"] == [
        {"ipMask": "198.51.100.7", "action": "Allow"},
        {"ipMask": "203.0.113.0/28", "action": "Allow"},
    ]
    hub = dev.one("azure-native:eventhub:EventHub").inputs
    assert (hub["eventHubName"], hub["partitionCount"]) == ("events", 8)
    assert hub["retentionDescription"] == {"cleanupPolicy": "Delete", "retentionTimeInHours": 24}
    rules = {
        r.inputs["authorizationRuleName"]: r.inputs["rights"]
        for r in dev.of_type("azure-native:eventhub:EventHubAuthorizationRule")
    }
    assert rules == {"send": ["Send"], "listen": ["Listen"]}
    assert not dev.of_type("azure-native:eventhub:NamespaceAuthorizationRule")
    guard = dev.named("events-partitions").inputs
    assert guard == {
        "namespace": "lakestack-azdev-events",
        "hub": "events",
        "partitions": 8,
        "__provider": guard["__provider"],
    }


def test_connection_strings_live_only_in_key_vault(dev):
    vault = dev.one("azure-native:keyvault:Vault").inputs
    assert "vaultName" not in vault  # generated: a purge-protected name stays taken after a destroy
    props = vault["properties"]
    assert {k: props[k] for k in props if k != "networkAcls"} == {
        "tenantId": TENANT,
        "sku": {"family": "A", "name": "standard"},
        "enableRbacAuthorization": True,
        "enableSoftDelete": True,
        "softDeleteRetentionInDays": 7,
        "enablePurgeProtection": True,
        "enabledForDeployment": False,
        "enabledForDiskEncryption": False,
        "enabledForTemplateDeployment": False,
        "publicNetworkAccess": "Enabled",
    }
    assert props["networkAcls"] == {
        "defaultAction": "Deny",
        "bypass": "AzureServices",
        "ipRules": [{"value": "198.51.100.7"}, {"value": "203.0.113.0/28"}],
    }
    # Each value reaches the provider marked secret (Pulumi encrypts it in the state, never prints it).
    secrets = {
        s.inputs["secretName"]: secret_value(s.inputs["properties"])
        for s in dev.of_type("azure-native:keyvault:Secret")
    }
    assert secrets == {
        "eventhubs-listen": {"value": LISTEN_KEY, "contentType": "text/plain"},
        "eventhubs-send": {"value": SEND_KEY, "contentType": "text/plain"},
    }


def test_workspace_identity_managed_network_entra_only_and_firewall(dev):
    ws = dev.one("azure-native:synapse:Workspace").inputs
    assert ws["identity"] == {"type": "SystemAssigned"}
    assert ws["defaultDataLakeStorage"] == {
        "accountUrl": "https://lakestackazdev.dfs.core.windows.net",
        "filesystem": "workspace",
        "resourceId": ACCOUNT_ID,
        "createManagedPrivateEndpoint": True,
    }
    assert ws["managedVirtualNetwork"] == "default"
    assert ws["azureADOnlyAuthentication"] is True
    assert "sqlAdministratorLoginPassword" not in ws
    rules = sorted(
        (r.inputs["ruleName"], r.inputs["startIpAddress"], r.inputs["endIpAddress"])
        for r in dev.of_type("azure-native:synapse:IpFirewallRule")
    )
    assert rules == [
        ("lakestack-0", "198.51.100.7", "198.51.100.7"),
        ("lakestack-1", "203.0.113.0", "203.0.113.15"),
    ]


def test_spark_pool_is_sized_by_parallelism_with_autoscale_and_auto_pause(dev):
    pool = dev.one("azure-native:synapse:BigDataPool").inputs
    assert {
        k: pool[k] for k in pool if k not in ("resourceGroupName", "location", "tags", "workspaceName")
    } == {
        "bigDataPoolName": "lakestack",
        "sparkVersion": "3.5",
        "nodeSize": "Small",
        "nodeSizeFamily": "MemoryOptimized",
        # parallelism 8 at 4 per worker: 2 workers + 1 driver node; maxWorkers 4: up to 5 nodes.
        "nodeCount": 3,
        "autoScale": {"enabled": True, "minNodeCount": 3, "maxNodeCount": 5},
        "autoPause": {"enabled": True, "delayInMinutes": 15},
        "dynamicExecutorAllocation": {"enabled": True, "minExecutors": 2, "maxExecutors": 4},
        "sessionLevelPackagesEnabled": False,
        "isAutotuneEnabled": False,
    }
    # Libraries come in a later update (Synapse refuses them at creation), as the program was given them.
    assert "libraryRequirements" not in pool
    libraries = dev.named("spark-libraries").inputs
    assert libraries["pool_id"] == POOL_ID
    assert libraries["requirements"] == "deltalake==1.6.6\npyarrow==21.0.0\n"


@pytest.mark.parametrize(
    ("parallelism", "per_worker", "node_size", "max_workers", "nodes", "max_nodes", "autoscale"),
    [
        (1, 4, "Small", 1, 3, 3, False),
        (12, 4, "Small", 5, 4, 6, True),
        (16, 8, "Medium", 2, 3, 3, False),
        (40, 16, "Large", 6, 4, 7, True),
    ],
)
def test_pool_sizing_follows_parallelism(
    run_azure, parallelism, per_worker, node_size, max_workers, nodes, max_nodes, autoscale
):
    run = run_azure(
        azure_dev(
            **{
                "lakestack:parallelism": parallelism,
                "lakestack:parallelismPerWorker": per_worker,
                "lakestack:cluster": {"nodeSize": node_size, "maxWorkers": max_workers},
                "lakestack:stream": {"partitions": 8},
            }
        )
    )
    pool = run.one("azure-native:synapse:BigDataPool").inputs
    assert (pool["nodeSize"], pool["nodeCount"]) == (node_size, nodes)
    assert pool["autoScale"] == {"enabled": autoscale, "minNodeCount": nodes, "maxNodeCount": max_nodes}


def test_the_jobs_identity_and_the_workspace_reach_only_this_stacks_storage_and_listen_secret(dev):
    grants = {
        a.name: (
            a.inputs["principalId"],
            a.inputs.get("principalType"),
            a.inputs["roleDefinitionId"],
            a.inputs["scope"],
        )
        for a in dev.of_type("azure-native:authorization:RoleAssignment")
    }
    contributor = role("ba92f5b4-2d11-453d-a403-e96b0029c9fe")
    ws = (WORKSPACE_PRINCIPAL, "ServicePrincipal")
    # The jobs run as the identity that submits them: the deployer. They read the hub with the listen secret's
    # connection string (SAS), so no Event Hubs data role (which only Entra ID clients use) is granted.
    jobs = (DEPLOYER, "User")
    assert grants == {
        "spark-access-jobs-lake": (*jobs, contributor, container("lake")),
        "spark-access-jobs-checkpoints": (*jobs, contributor, container("checkpoints")),
        "spark-access-jobs-logs": (*jobs, contributor, container("logs")),
        "spark-access-jobs-listen-secret": (
            *jobs,
            role("4633458b-17de-408a-b874-0445c86b69e6"),
            f"{VAULT_ID}/secrets/eventhubs-listen",
        ),
        "spark-access-deployer-artifacts": (*jobs, contributor, container("artifacts")),
        "spark-access-workspace-workspace": (*ws, contributor, container("workspace")),
        "spark-access-workspace-artifacts": (
            *ws,
            role("2a2b9908-6ea1-4ae2-8e65-a410df84e7d1"),
            container("artifacts"),
        ),
        "deployer-access-deployer-send-secret": (
            DEPLOYER,
            "User",
            role("4633458b-17de-408a-b874-0445c86b69e6"),
            f"{VAULT_ID}/secrets/eventhubs-send",
        ),
    }


def test_managed_private_endpoints_reach_storage_vault_and_namespace(dev):
    endpoints = dev.named("private-endpoints").inputs
    assert endpoints["workspace_name"] == "lakestack-azdev"
    assert endpoints["workspace_endpoint"] == "https://lakestack-azdev.dev.azuresynapse.net"
    assert endpoints["targets"] == [
        {"name": "lakestack-blob", "resource_id": ACCOUNT_ID, "group_id": "blob"},
        {"name": "lakestack-dfs", "resource_id": ACCOUNT_ID, "group_id": "dfs"},
        {"name": "lakestack-vault", "resource_id": VAULT_ID, "group_id": "vault"},
        {"name": "lakestack-eventhubs", "resource_id": NAMESPACE_ID, "group_id": "namespace"},
    ]


def test_diagnostic_settings_send_every_resource_to_log_analytics_with_retention(dev):
    logs = dev.one("azure-native:operationalinsights:Workspace").inputs
    assert (logs["workspaceName"], logs["sku"], logs["retentionInDays"]) == (
        "lakestack-azdev-logs",
        {"name": "PerGB2018"},
        30,
    )
    workspace_id = f"{GROUP}/providers/Microsoft.OperationalInsights/workspaces/lakestack-azdev-logs"
    settings = {
        d.inputs["resourceUri"]: d.inputs["metrics"]
        for d in dev.of_type("azure-native:monitor:DiagnosticSetting")
    }
    assert settings == {
        f"{ACCOUNT_ID}/blobServices/default": [{"category": "Transaction", "enabled": True}],
        NAMESPACE_ID: [{"category": "AllMetrics", "enabled": True}],
        VAULT_ID: [{"category": "AllMetrics", "enabled": True}],
        WORKSPACE_ID: [],
        POOL_ID: [],
    }
    for setting in dev.of_type("azure-native:monitor:DiagnosticSetting"):
        assert setting.inputs["workspaceId"] == workspace_id
        assert setting.inputs["logs"] == [{"categoryGroup": "allLogs", "enabled": True}]
        assert setting.inputs["logAnalyticsDestinationType"] == "Dedicated"


def test_job_is_uploaded_under_its_hash_and_runs_the_c8_command_line(dev):
    upload = dev.named("jobs-artifacts").inputs
    assert (upload["account_url"], upload["container"], upload["prefix"]) == (
        "https://lakestackazdev.blob.core.windows.net",
        "artifacts",
        "jobs/0123456789abcdef/",
    )
    assert sorted(upload["files"]) == ["lakestack_jobs-0.1.0-py3-none-any.whl", "run_job.py"]
    job = dev.named("jobs-ingest").inputs
    assert (job["workspace_endpoint"], job["pool_name"], job["job_name"]) == (
        "https://lakestack-azdev.dev.azuresynapse.net",
        "lakestack",
        "lakestack-ingest",
    )
    base = "abfss://artifacts@lakestackazdev.dfs.core.windows.net/jobs/0123456789abcdef/"
    definition = job["definition"]
    assert definition["targetBigDataPool"] == {"referenceName": "lakestack", "type": "BigDataPoolReference"}
    assert definition["requiredSparkVersion"] == "3.5"
    props = definition["jobProperties"]
    assert props["file"] == f"{base}run_job.py"
    assert props["conf"]["spark.submit.pyFiles"] == f"{base}lakestack_jobs-0.1.0-py3-none-any.whl"
    assert props["args"] == [
        "ingest",
        "--source",
        "kafka",
        "--kafka-bootstrap",
        "lakestack-azdev-events.servicebus.windows.net:9093",
        "--topic",
        "events",
        "--table",
        "abfss://lake@lakestackazdev.dfs.core.windows.net/bronze/events",
        "--checkpoint",
        "abfss://checkpoints@lakestackazdev.dfs.core.windows.net/ingest/events",
        "--kafka-key-vault",
        "secrets-vault1a2b3c",
        "--kafka-secret-name",
        "eventhubs-listen",
    ]
    assert (props["numExecutors"], props["executorCores"], props["executorMemory"]) == (2, 4, "28g")
    assert (props["driverCores"], props["driverMemory"]) == (4, "28g")
    assert props["conf"]["spark.dynamicAllocation.maxExecutors"] == "4"
    assert props["conf"]["spark.sql.shuffle.partitions"] == "8"


def test_new_artifact_hash_changes_the_upload_and_the_job(run_azure, tmp_path):
    run = run_azure(azure_dev(), artifacts=fake_synapse_artifacts(tmp_path, "fedcba9876543210"))
    assert run.named("jobs-artifacts").inputs["prefix"] == "jobs/fedcba9876543210/"
    props = run.named("jobs-ingest").inputs["definition"]["jobProperties"]
    assert (
        props["file"]
        == "abfss://artifacts@lakestackazdev.dfs.core.windows.net/jobs/fedcba9876543210/run_job.py"
    )


def test_switched_off_controls_are_switched_off(run_azure):
    run = run_azure(
        azure_dev(
            **{
                "lakestack:security": {
                    "storageFirewall": False,
                    "storageSharedKey": True,
                    "diagnostics": False,
                }
            }
        )
    )
    account = run.one("azure-native:storage:StorageAccount").inputs
    assert account["allowSharedKeyAccess"] is True
    assert account["networkRuleSet"] == {
        "defaultAction": "Allow",
        "bypass": "AzureServices, Logging, Metrics",
    }
    assert not run.of_type("azure-native:monitor:DiagnosticSetting")
    assert not run.of_type("azure-native:operationalinsights:Workspace")
    assert run.exports["log_workspace_id"] is None


def test_stack_without_pool_declares_no_workspace_job_or_workspace_grants(run_azure):
    run = run_azure(azure_dev(**{"lakestack:cluster": {"enabled": False}, "lakestack:network": {}}))
    types = {r.typ for r in run.resources}
    assert "azure-native:synapse:Workspace" not in types
    assert "pulumi-python:dynamic:Resource" in types  # only the partition guard
    assert [r.name for r in run.of_type("pulumi-python:dynamic:Resource")] == ["events-partitions"]
    assert [a.name for a in run.of_type("azure-native:authorization:RoleAssignment")] == [
        "deployer-access-deployer-send-secret"
    ]
    account = run.one("azure-native:storage:StorageAccount").inputs
    assert account["networkRuleSet"]["resourceAccessRules"] == []
    assert (run.exports["workspace_name"], run.exports["cluster_id"]) == (None, None)


@pytest.mark.parametrize(
    ("override", "error", "message"),
    [
        (
            {"lakestack:cluster": {"nodeSize": "Huge"}},
            ConfigError,
            "lakestack:cluster.nodeSize = 'Huge'; expected one of Small, Medium, Large, XLarge, XXLarge",
        ),
        (
            {"lakestack:cluster": {"instanceType": "m5.xlarge"}},
            ConfigError,
            "lakestack:cluster.instanceType = 'm5.xlarge'; expected one of the keys enabled, nodeSize",
        ),
        (
            {"lakestack:parallelismPerWorker": 8},
            ConfigError,
            "lakestack:parallelismPerWorker = 8; expected an integer from 1 to 4 (the vCores of a Small node)",
        ),
        (
            {"lakestack:network": {"allowedIpRanges": ["10.1.2.3"]}},
            ConfigError,
            "lakestack:network.allowedIpRanges = '10.1.2.3'; expected public IPv4 addresses",
        ),
        (
            {"lakestack:network": {"allowedIpRanges": []}},
            NotBuiltError,
            "lakestack:network.allowedIpRanges is empty",
        ),
    ],
)
def test_invalid_configuration_stops_before_any_resource(tmp_path, override, error, message):
    run = Run()
    with pytest.raises(error) as caught:
        execute_azure_program(azure_dev(**override), tmp_path=tmp_path, run=run)
    assert message in str(caught.value)
    assert run.resources == []
