"""Live world size: the worker StatefulSet's ``spec.replicas`` from the Kubernetes API.

Used when ``TFD_REPLICAS_SOURCE=api`` (an autoscaler may change the replica count). Standard
library only: one authenticated GET with the pod's projected service-account token.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping

from trainer import contract
from trainer.errors import ContractError

_TIMEOUT_S = 5.0


def statefulset_url(env: Mapping[str, str]) -> str:
    """``{api}/apis/apps/v1/namespaces/{ns}/statefulsets/{name}`` from the contract env."""
    base = (env.get(contract.ENV_API_URL, "").strip() or contract.DEFAULT_API_URL).rstrip("/")
    namespace = env.get(contract.ENV_NAMESPACE, "").strip()
    name = env.get(contract.ENV_STATEFULSET, "").strip()
    for key, value in ((contract.ENV_NAMESPACE, namespace), (contract.ENV_STATEFULSET, name)):
        if not value:
            raise ContractError(f"{key}: required when {contract.ENV_REPLICAS_SOURCE}=api")
    return f"{base}/apis/apps/v1/namespaces/{namespace}/statefulsets/{name}"


def live_replicas(env: Mapping[str, str], timeout_s: float = _TIMEOUT_S) -> int:
    """``spec.replicas`` of this worker's StatefulSet.

    Raises:
        ContractError: the token/CA cannot be read, the API call fails, or the answer has no
            positive integer ``spec.replicas``; the message names the URL or file.
    """
    url = statefulset_url(env)
    token_path = env.get(contract.ENV_API_TOKEN_PATH, "") or contract.DEFAULT_API_TOKEN_PATH
    try:
        with open(token_path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as err:
        raise ContractError(
            f"{contract.ENV_API_TOKEN_PATH}: cannot read {token_path!r}: {err}"
        ) from None
    context = None
    if url.startswith("https://"):
        ca_path = env.get(contract.ENV_API_CA_PATH, "") or contract.DEFAULT_API_CA_PATH
        try:
            context = ssl.create_default_context(cafile=ca_path)
        except (OSError, ssl.SSLError) as err:
            raise ContractError(
                f"{contract.ENV_API_CA_PATH}: cannot load {ca_path!r}: {err}"
            ) from None
    request = urllib.request.Request(
        url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s, context=context) as resp:
            doc = json.loads(resp.read())
    except urllib.error.HTTPError as err:
        raise ContractError(f"GET {url}: HTTP {err.code} {err.reason}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ContractError(f"GET {url}: {err}") from None
    replicas = (doc.get("spec") or {}).get("replicas") if isinstance(doc, dict) else None
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ContractError(f"GET {url}: spec.replicas must be an integer >= 1; got {replicas!r}")
    return replicas
