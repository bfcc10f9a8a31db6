"""``self.ctx``: what an actor can do beyond its own state."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Any

from ._caller import ActorProxy, Caller, Params, split_params
from ._proto.troupe.v1 import common_pb2

# The call chain of the turn running in the current asyncio task. Each turn runs
# in its own task, so concurrent turns of different actors never see each
# other's chain, and tasks a turn spawns inherit it.
current_chain: ContextVar[common_pb2.CallChain | None] = ContextVar(
    "troupe_current_chain", default=None
)


class Context:
    """Calls to other actors made from inside a turn.

    Calls carry the turn's call chain with this actor appended, so the daemon can
    allow re-entry for reentrant types and detect deadlock cycles for the others.
    """

    def __init__(self, caller: Caller, actor_type: str, actor_id: str) -> None:
        self._caller = caller
        self._self = common_pb2.ActorRef(type=actor_type, id=actor_id)

    def _chain(self) -> common_pb2.CallChain:
        incoming = current_chain.get()
        if incoming is None:
            return common_pb2.CallChain(id=uuid.uuid4().hex, actors=[self._self])
        return common_pb2.CallChain(
            id=incoming.id or uuid.uuid4().hex, actors=[*incoming.actors, self._self]
        )

    def actor(
        self,
        actor_type: str,
        actor_id: str,
        *,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> ActorProxy:
        """A proxy on another actor: ``await self.ctx.actor("t", "id").method(...)``."""

        async def invoke(
            t: str, i: str, m: str, args: Sequence[Any], kwargs: Mapping[str, Any]
        ) -> Any:
            return await self._caller.invoke(
                t, i, m, args, kwargs, timeout=timeout, metadata=metadata, chain=self._chain()
            )

        return ActorProxy(invoke, actor_type, actor_id)

    async def invoke(
        self,
        actor_type: str,
        actor_id: str,
        method: str,
        params: Params = None,
        *,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> Any:
        """Call a method on another actor and return its result (see Client.invoke)."""
        args, kwargs = split_params(params)
        return await self._caller.invoke(
            actor_type,
            actor_id,
            method,
            args,
            kwargs,
            timeout=timeout,
            metadata=metadata,
            chain=self._chain(),
        )

    async def tell(
        self,
        actor_type: str,
        actor_id: str,
        method: str,
        params: Params = None,
        *,
        timeout: float | None = None,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Queue a call on another actor without waiting for its result."""
        args, kwargs = split_params(params)
        await self._caller.tell(
            actor_type,
            actor_id,
            method,
            args,
            kwargs,
            timeout=timeout,
            metadata=metadata,
            chain=self._chain(),
        )
