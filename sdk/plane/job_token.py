"""A job's own token: what a daemon hands the job it runs, instead of its own credential.

A job's process used to inherit its daemon's token, so any job could act as its worker: claim
the queue's other jobs (and read their payloads), settle them with results of its choosing,
renew or release leases, register workers; with the default token, reconfigure queues too. Now
the server mints, with each job a claim over HTTP hands out, a token for that one attempt
(`Claim.job_token`), and the daemon puts that in the job's environment (LAKESHORE_TOKEN) in
place of its own, for as long as the job runs. A job token:

- opens its job's namespace only, not the org's siblings;
- holds those of `read`, `submit-data` and `submit-code` the claiming token holds (a job submits
  and reads follow-up work as its daemon could), and `job`: the plane-tier objects and topic
  posts a job's own code reads and writes, which a worker's `work` scope covers; never `work`,
  `manage` or `admin`, so it cannot claim, settle, renew, release or post another job's frames;
- opens nothing once its invocation is no longer running under the lease it was minted for
  (settled, released, killed, requeued after a lost lease), within the server's grant cache.

It is stateless: `lksj_<id>.<scopes>.<mac>`, an HMAC-SHA256 over (namespace, id, lease, scopes)
under a key derived from the server's payload-signing key, checked against the invocation's row.
Nothing is stored or to clean up, and the database alone mints none (it holds the leases, not
the key). A server without a signing key mints none, and its daemons' jobs get no token.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from dreamlake.lakeshore.types import Claim

from .auth import JOB, READ, SUBMIT_CODE, SUBMIT_DATA, TokenScope

PREFIX: Final = "lksj_"
#: The scopes a job token takes from the token that claimed its job, when that one holds them.
INHERITED: Final = (READ, SUBMIT_DATA, SUBMIT_CODE)
_CONTEXT: Final = b"lakeshore job token v1"


@functools.lru_cache(maxsize=4)
def _key(signing_key: bytes) -> bytes:
    """A key of its own, so that no job token is ever a valid payload signature or the reverse."""
    return hmac.new(signing_key, _CONTEXT, hashlib.sha256).digest()


def _mac(signing_key: bytes, namespace: str, inv_id: str, lease: str, scopes: str) -> str:
    message = "\0".join((namespace, inv_id, lease, scopes)).encode("utf-8")
    return hmac.digest(_key(signing_key), message, "sha256").hex()


@functools.lru_cache(maxsize=256)  # one per claiming token's scopes: a claim pays a lookup
def job_scopes(holder: TokenScope) -> str:
    """The scopes a job of `holder`'s claims gets, as its token spells them (`job+read+...`)."""
    return "+".join([JOB, *(s for s in INHERITED if holder.allows(s))])


def with_job_tokens(signing_key: bytes, claims: Sequence[Claim], holder: TokenScope) -> list[Claim]:
    """`claims` as the claimer receives them: each with its job's token."""
    scopes = job_scopes(holder)
    return [dataclasses.replace(c, job_token=_mint(signing_key, c, scopes)) for c in claims]


def _mint(signing_key: bytes, claim: Claim, scopes: str) -> str:
    mac = _mac(signing_key, claim.namespace, claim.id, claim.lease, scopes)
    return f"{PREFIX}{claim.id}.{scopes}.{mac}"


@dataclass(frozen=True)
class JobToken:
    """A presented job token, parsed; `matches` says whether it is genuine for a row."""

    inv_id: str
    scopes: frozenset[str]
    _spelled: str
    _mac: str

    def matches(self, signing_key: bytes, namespace: str, lease: str) -> bool:
        expected = _mac(signing_key, namespace, self.inv_id, lease, self._spelled)
        return hmac.compare_digest(expected, self._mac)

    def scope(self, namespace: str) -> TokenScope:
        return TokenScope(
            namespace=namespace, org=None, label=f"job {self.inv_id}", scopes=self.scopes
        )


def parse(token: str) -> JobToken | None:
    """The parts of a job token, or None for anything that is not shaped as one."""
    if not token.startswith(PREFIX):
        return None
    parts = token[len(PREFIX) :].rsplit(".", 2)
    if len(parts) != 3 or not all(parts):
        return None
    inv_id, spelled, mac = parts
    names = spelled.split("+")
    if names[0] != JOB or not set(names[1:]) <= set(INHERITED):
        return None
    return JobToken(inv_id, frozenset(names), spelled, mac)
