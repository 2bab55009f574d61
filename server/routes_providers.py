"""Named provider configs of a namespace: `lakeshore providers add / ls / show / rm`.

Like the secrets and modes routes (and unlike the queue routes), these create the namespace on
first use. The config object is checked for shape here and by its plugin when it is built.
"""

from __future__ import annotations

from typing import Any

from dreamlake.lakeshore.plane import routes
from dreamlake.lakeshore.plane.auth import MANAGE
from dreamlake.lakeshore.plane.providers import ProviderInfo

from .endpoint import Api, Call


async def add_provider(call: Call) -> ProviderInfo:
    b = call.body
    b.only("name", "kind", "config")
    name, kind = b.req_text("name"), b.req_text("kind")
    config = b.mapping("config") or {}
    return await call.run(call.store.add_provider, call.ns, name, kind, config)


async def list_providers(call: Call) -> dict[str, Any]:
    return {"providers": await call.run(call.store.providers, call.ns)}


async def show_provider(call: Call) -> ProviderInfo:
    return await call.run(call.store.provider, call.ns, call.param("name"))


async def delete_provider(call: Call) -> None:
    await call.run(call.store.delete_provider, call.ns, call.param("name"))


ROUTES = [
    Api(
        routes.ADD_PROVIDER,
        add_provider,
        "Add a named provider config; 409 if it exists",
        201,
        scopes=(MANAGE,),
    ),
    Api(
        routes.PROVIDERS,
        list_providers,
        "Named provider configs of the namespace",
        scopes=(MANAGE,),
    ),
    Api(routes.PROVIDER, show_provider, "One provider config", scopes=(MANAGE,)),
    Api(
        routes.DELETE_PROVIDER,
        delete_provider,
        "Remove a provider config",
        204,
        scopes=(MANAGE,),
    ),
]
