"""The real Azure clients behind the dynamic providers' small interfaces.

They only translate calls to the Azure SDKs and REST APIs, with ``DefaultAzureCredential`` (Entra ID: the Azure
CLI login, a service principal's environment variables, or a managed identity). They need a real workspace,
account and subscription, so no test here exercises them: the logic that decides what to call is in
``infra.azure.deploy``, ``infra.azure.libraries`` and ``infra.azure.private_link``, tested against fakes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from infra.azure.errors import NotAuthorized

ARM_ENDPOINT = "https://management.azure.com"
ARM_SCOPE = "https://management.azure.com/.default"
SYNAPSE_SCOPE = "https://dev.azuresynapse.net/.default"
MANAGED_PRIVATE_ENDPOINTS_API = "2021-06-01-preview"
# Livy batch states after which a batch holds no executors and writes nothing more.
TERMINAL_STATES = frozenset({"dead", "killed", "success", "error"})
# Livy lists batches 20 at a time (its maximum page).
_PAGE = 20


class SparkBatch(NamedTuple):
    """One Livy batch of the pool, as the job logic needs it."""

    id: int
    name: str
    state: str

    @property
    def active(self) -> bool:
        """True while the batch may still run or write."""
        return self.state not in TERMINAL_STATES


def _credential() -> Any:
    from azure.identity import DefaultAzureCredential

    return DefaultAzureCredential()


def signed_in_object_id() -> str:
    """The Entra object id (``oid`` claim) of the identity ``DefaultAzureCredential`` signs in as here."""
    import base64
    import json

    token = _credential().get_token(SYNAPSE_SCOPE).token
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return str(claims.get("oid", ""))


class _Rest:
    """JSON over HTTPS with a bearer token for one scope, retried by azure-core's default policies."""

    def __init__(self, base_url: str, scope: str) -> None:
        from azure.core import PipelineClient
        from azure.core.pipeline import policies

        self._client: Any = PipelineClient(
            base_url,
            policies=[
                policies.HeadersPolicy(),
                policies.UserAgentPolicy("lakestack"),
                policies.RetryPolicy(),
                policies.BearerTokenCredentialPolicy(_credential(), scope),
                policies.NetworkTraceLoggingPolicy(),
            ],
        )

    def call(self, method: str, path: str, api_version: str, body: Mapping[str, Any] | None = None) -> Any:
        from azure.core.rest import HttpRequest

        request = HttpRequest(method, path, params={"api-version": api_version}, json=body)
        response = self._client.send_request(request)
        if method == "DELETE" and response.status_code == 404:
            return None
        response.raise_for_status()
        return response.json() if response.text() else None


class RestArmClient:
    """Azure Resource Manager by resource id."""

    def __init__(self) -> None:
        self._rest = _Rest(ARM_ENDPOINT, ARM_SCOPE)

    def get(self, resource_id: str, api_version: str) -> dict[str, Any]:
        return dict(self._rest.call("GET", resource_id, api_version) or {})

    def put(self, resource_id: str, api_version: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return dict(self._rest.call("PUT", resource_id, api_version, body) or {})

    def list(self, collection_id: str, api_version: str) -> list[dict[str, Any]]:
        return list((self._rest.call("GET", collection_id, api_version) or {}).get("value", []))


class RestManagedEndpointClient:
    """Managed private endpoints of the workspace's ``default`` managed virtual network."""

    def __init__(self, workspace_endpoint: str) -> None:
        self._rest = _Rest(workspace_endpoint, SYNAPSE_SCOPE)
        self._base = "/managedVirtualNetworks/default/managedPrivateEndpoints"

    def list(self) -> list[dict[str, Any]]:
        return list(
            (self._rest.call("GET", self._base, MANAGED_PRIVATE_ENDPOINTS_API) or {}).get("value", [])
        )

    def put(self, name: str, resource_id: str, group_id: str) -> None:
        body = {"properties": {"privateLinkResourceId": resource_id, "groupId": group_id}}
        self._rest.call("PUT", f"{self._base}/{name}", MANAGED_PRIVATE_ENDPOINTS_API, body)

    def delete(self, name: str) -> None:
        self._rest.call("DELETE", f"{self._base}/{name}", MANAGED_PRIVATE_ENDPOINTS_API)


class SynapseClient:
    """Spark job definitions (azure-synapse-artifacts) and the pool's batches (azure-synapse-spark)."""

    def __init__(self, workspace_endpoint: str, pool_name: str) -> None:
        from azure.synapse.artifacts import ArtifactsClient
        from azure.synapse.spark import SparkClient

        credential = _credential()
        self._artifacts = ArtifactsClient(credential=credential, endpoint=workspace_endpoint)
        self._spark = SparkClient(credential, workspace_endpoint, pool_name)

    def put_job_definition(self, name: str, definition: Mapping[str, Any]) -> None:
        from azure.synapse.artifacts.models import SparkJobDefinition

        properties = SparkJobDefinition.deserialize(dict(definition))
        self._artifacts.spark_job_definition.begin_create_or_update_spark_job_definition(
            name, properties
        ).result()

    def delete_job_definition(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            self._artifacts.spark_job_definition.begin_delete_spark_job_definition(name).result()
        except ResourceNotFoundError:
            return

    def run_job_definition(self, name: str) -> None:
        # polling=False: the batch is listed right away; a streaming batch never "completes".
        self._artifacts.spark_job_definition.begin_execute_spark_job_definition(name, polling=False).result()

    def batches(self) -> list[SparkBatch]:
        found: list[SparkBatch] = []
        start = 0
        while True:
            page = self._spark.spark_batch.get_spark_batch_jobs(from_parameter=start, size=_PAGE)
            sessions = page.sessions or []
            found.extend(SparkBatch(int(s.id), str(s.name or ""), str(s.state or "")) for s in sessions)
            start += len(sessions)
            if not sessions or start >= (page.total or 0):
                return found

    def cancel_batch(self, batch_id: int) -> None:
        self._spark.spark_batch.cancel_spark_batch_job(batch_id)


class BlobArtifactStore:
    """Blobs of one account, through its blob endpoint (works on a hierarchical namespace too)."""

    def __init__(self, account_url: str) -> None:
        from azure.storage.blob import BlobServiceClient

        self._service = BlobServiceClient(account_url=account_url, credential=_credential())

    def upload(self, container: str, path: str, data: bytes) -> None:
        from azure.core.exceptions import HttpResponseError

        try:
            self._service.get_blob_client(container, path).upload_blob(data, overwrite=True)
        except HttpResponseError as error:
            if error.status_code == 403:
                raise NotAuthorized(str(error.reason or error.message)) from error
            raise

    def delete_prefix(self, container: str, prefix: str) -> int:
        from azure.core.exceptions import ResourceNotFoundError

        client = self._service.get_container_client(container)
        deleted = 0
        try:
            # Deepest first: on a hierarchical namespace a folder goes after its files.
            names = sorted((b.name for b in client.list_blobs(name_starts_with=prefix)), reverse=True)
            for name in names:
                client.delete_blob(name)
                deleted += 1
        except ResourceNotFoundError:
            pass
        return deleted
