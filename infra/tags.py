"""Stack-wide tags on every taggable resource, whatever component declares it.

One stack transformation adds them, so a resource added later cannot be forgotten. A resource is taggable when
its class takes a ``tags`` input (every AWS and Azure resource that AWS or Azure can tag does); the stack's
tags win over a component's own tags of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pulumi


def _merge(own: Any, tags: Mapping[str, str]) -> Any:
    if own is None or isinstance(own, Mapping):
        return {**(own or {}), **tags}
    return pulumi.Output.from_input(own).apply(lambda resolved: {**(resolved or {}), **tags})


def tagging(tags: Mapping[str, str]) -> pulumi.ResourceTransformation:
    """A transformation that merges ``tags`` into every resource that has a ``tags`` input."""
    fixed = dict(tags)

    def transform(args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        if "tags" not in args.props:
            return None
        return pulumi.ResourceTransformationResult(
            props={**args.props, "tags": _merge(args.props.get("tags"), fixed)}, opts=args.opts
        )

    return transform


def tag_every_resource(tags: Mapping[str, str]) -> None:
    """Register :func:`tagging` on the stack; call before declaring any resource."""
    pulumi.runtime.register_stack_transformation(tagging(tags))
