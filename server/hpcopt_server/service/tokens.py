"""API tokens with scopes. Secrets are shown once at creation; only their SHA-256 is stored.

Scopes and what they allow:

| scope    | allows                                                    |
|----------|-----------------------------------------------------------|
| `read`   | every GET, ListCampaigns/GetCampaign/ListTrials/..., /metrics |
| `submit` | create, cancel, import and steer campaigns (and everything `read` allows) |
| `agent`  | the AgentService RPCs                                     |
| `admin`  | everything                                                |

Steering is stopping a trial, pausing or resuming a campaign, raising its budget
(``service/steering.py``).

When auth is on, and why it cannot fail open:

- Auth is a flag stored in the database (``server_flags.auth``), not a count of tokens.
  Creating a token turns it on; so does serving with ``--require-auth`` or on an
  address beyond loopback. Revoking tokens, even the last one, never turns it off.
- Only ``hpcopt-server auth disable`` turns it off: an explicit command run by someone
  with access to the database, which says what it does. A server that has seen auth on
  keeps it on until it restarts, whatever the flag says meanwhile.
- Locked out (every admin token revoked or lost)? Whoever can reach the database can
  always mint a new one: ``hpcopt-server token create --db URL --scope admin --name NAME``
  (or restart the server with ``HPCOPT_ADMIN_TOKEN`` set).
"""

from __future__ import annotations

import hashlib
import secrets
import threading

from hpcopt_server import domain as d
from hpcopt_server.errors import InvalidArgument, NotFound, PermissionDenied, Unauthenticated
from hpcopt_server.service import limits as lim
from hpcopt_server.service.context import Context

SCOPES = ("read", "submit", "agent", "admin")
IMPLIES = {"admin": set(SCOPES), "submit": {"submit", "read"}, "read": {"read"}, "agent": {"agent"}}
PREFIX = "hpc_"
AUTH_FLAG = "auth"


def hash_token(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def grants(scopes: frozenset[str], needed: str) -> bool:
    return any(needed in IMPLIES.get(s, set()) for s in scopes)


class TokenService:
    """Creates tokens and checks presented secrets (with a short cache: a revoked token
    stops working within ``cache_seconds``)."""

    def __init__(self, ctx: Context, cache_seconds: float = 5.0, require_auth: bool = False):
        self.ctx = ctx
        self.cache_seconds = cache_seconds
        self.require_auth = require_auth
        self._cache: dict[str, tuple[float, d.ApiToken | None]] = {}
        self._enabled: tuple[float, bool] | None = None
        self._latched = require_auth  # once on in this process, on until it exits
        self._lock = threading.Lock()

    def create(self, name: str, scopes: list[str], secret: str | None = None) -> tuple[d.ApiToken, str]:
        """Returns the token and its secret (the only time the secret is available)."""
        bad = [s for s in scopes if s not in SCOPES]
        if not scopes or bad:
            raise InvalidArgument(
                f"scope must be one or more of {list(SCOPES)}, got {scopes}",
                [("scope", f"allowed: {list(SCOPES)}")],
            )
        if not name:
            raise InvalidArgument("a token needs a name", [("name", "must not be empty")])
        lim.require_text("name", name, 200)
        secret = secret or PREFIX + secrets.token_urlsafe(32)
        with self.ctx.storage.write() as tx:
            tx.flags.set(AUTH_FLAG, "on", self.ctx.clock())
            existing = tx.tokens.by_hash(hash_token(secret))
            if existing is not None:
                return existing, secret
            token = tx.tokens.insert(name, hash_token(secret), scopes, self.ctx.clock())
        self._invalidate()
        return token, secret

    def turn_on(self) -> None:
        """Turns auth on for good (until ``turn_off``); creating a token does it too."""
        with self.ctx.storage.write() as tx:
            tx.flags.set(AUTH_FLAG, "on", self.ctx.clock())
        self._invalidate()

    def turn_off(self) -> None:
        """Turns auth off: the explicit opening. Running servers keep auth on until restarted."""
        with self.ctx.storage.write() as tx:
            tx.flags.set(AUTH_FLAG, "off", self.ctx.clock())
        self._invalidate()
        with self._lock:
            self._latched = self.require_auth

    def stored_state(self) -> tuple[bool, int]:
        """(the stored flag, how many active tokens exist)."""
        with self.ctx.storage.read() as tx:
            return tx.flags.get(AUTH_FLAG) == "on", tx.tokens.count_active()

    def list_all(self) -> list[d.ApiToken]:
        with self.ctx.storage.read() as tx:
            return tx.tokens.stored()

    def revoke(self, token_id: int) -> None:
        """Revokes a token. Auth stays on, whatever tokens remain."""
        lim.require_id("id", token_id)
        with self.ctx.storage.write() as tx:
            try:
                tx.tokens.revoke(token_id, self.ctx.clock())
            except KeyError:
                raise NotFound(f"token {token_id} does not exist") from None
        self._invalidate()

    def enabled(self) -> bool:
        """Whether requests must carry a token: the stored flag, latched on in this process."""
        if self._latched:
            return True
        now = self.ctx.monotonic()
        with self._lock:
            if self._enabled and now - self._enabled[0] < self.cache_seconds:
                return self._enabled[1]
        with self.ctx.storage.read() as tx:
            on = tx.flags.get(AUTH_FLAG) == "on"
        with self._lock:
            self._enabled = (now, on)
            self._latched = self._latched or on
        return on

    def describe(self, secret: str | None) -> tuple[bool, d.ApiToken | None]:
        """(whether auth is on, the presented token if it is known and not revoked)."""
        if not self.enabled():
            return False, None
        token = self._lookup(secret) if secret else None
        return True, token if token is not None and token.revoked_at is None else None

    def authorize(self, secret: str | None, needed: str) -> d.ApiToken | None:
        """Checks a presented secret for a scope. Returns the token (None with auth off)."""
        if not self.enabled():
            return None
        if not secret:
            raise Unauthenticated(
                f"this server requires a token with scope {needed!r} "
                "(REST: 'Authorization: Bearer TOKEN'; gRPC: 'authorization' metadata)"
            )
        token = self._lookup(secret)
        if token is None or token.revoked_at is not None:
            raise Unauthenticated("the token is unknown or revoked")
        if not grants(token.scopes, needed):
            raise PermissionDenied(f"token {token.name!r} has scopes {sorted(token.scopes)}; this needs {needed!r}")
        return token

    def _lookup(self, secret: str) -> d.ApiToken | None:
        digest = hash_token(secret)
        now = self.ctx.monotonic()
        with self._lock:
            hit = self._cache.get(digest)
            if hit and now - hit[0] < self.cache_seconds:
                return hit[1]
        with self.ctx.storage.read() as tx:
            token = tx.tokens.by_hash(digest)
        with self._lock:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[digest] = (now, token)
        return token

    def _invalidate(self) -> None:
        with self._lock:
            self._cache.clear()
            self._enabled = None
