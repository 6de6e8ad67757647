"""Who may change a campaign.

A campaign records the principal that created (or imported) it: the name of its token
(``Campaign.owner``). Tokens are principals by name, so several tokens of one name (a
user's laptop and cluster tokens, or a team's) share their campaigns, and a rotated
token (a new one of the same name) keeps them. Changing a campaign (steering: stop a
trial, pause, resume, raise the budget; cancel; saving a note) needs:

- auth off (no token: whoever reaches a loopback server may do everything), or
- a token of the owner's name, or
- a token with the ``admin`` scope, or
- a campaign with no owner: created with auth off, or before campaigns had owners
  (migration 0012). Every ``submit`` token may change it, as before.

Reading stays as it was: every ``read`` token reads every campaign. The scope is
checked first (``submit`` for all of these), then the owner, in the transaction that
makes the change, so a refused call changes nothing.
"""

from __future__ import annotations

from hpcopt_server import domain as d
from hpcopt_server.errors import PermissionDenied


def may_change(campaign: d.Campaign, token: d.ApiToken | None) -> bool:
    return token is None or campaign.owner is None or token.name == campaign.owner or "admin" in token.scopes


def require_owner(campaign: d.Campaign, token: d.ApiToken | None, action: str) -> None:
    """PermissionDenied unless ``token`` may change ``campaign`` (``action`` says what)."""
    if not may_change(campaign, token):
        assert token is not None
        raise PermissionDenied(
            f"campaign {campaign.id} belongs to {campaign.owner!r}: token {token.name!r} may read it but not "
            f"{action} it; only a token named {campaign.owner!r} or one with the admin scope may"
        )
