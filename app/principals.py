"""Who a request acts for: the principal of its API key, with a role.

`RIDGELINE_API_KEYS` entries are `name:role:key` (role `read`, `write` or `admin`) or a bare
`key` (an admin named `key-<8 hex digits of its SHA-256>`, as every key was before roles).
`read` keys may list and read what they own, `write` keys may also create and change, `admin`
keys may also list, cancel and delete other principals' plans. Names go to the logs and the
plans a principal creates; keys never do.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["PRINCIPAL", "Principal", "Role", "parse_keys", "principal_of"]

PRINCIPAL = "ridgeline.principal"
"""`Session.info` key: the name of the principal a write's transaction acts for."""


class Role(StrEnum):
    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


_RANK = {Role.READ: 0, Role.WRITE: 1, Role.ADMIN: 2}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    role: Role

    def may(self, role: Role) -> bool:
        """Whether this principal's role includes `role`'s rights."""
        return _RANK[self.role] >= _RANK[role]


def parse_keys(entries: list[str]) -> dict[str, Principal]:
    """Each key of `entries` with its principal; `ValueError` naming the entry's position when
    one is malformed (a key is never echoed)."""
    found: dict[str, Principal] = {}
    names: set[str] = set()
    for i, entry in enumerate(entries):
        parts = entry.split(":", 2)
        if len(parts) == 3:
            name, role, key = parts
            if not _NAME.match(name):
                raise ValueError(f"api_keys[{i}]: the name must match {_NAME.pattern}")
            if role not in Role.__members__.values():
                raise ValueError(f"api_keys[{i}]: the role must be read, write or admin")
        elif len(parts) == 1:
            key = entry
            name, role = f"key-{hashlib.sha256(key.encode()).hexdigest()[:8]}", Role.ADMIN
        else:
            raise ValueError(f"api_keys[{i}]: give `name:role:key` or a bare key")
        if not key:
            raise ValueError(f"api_keys[{i}]: the key is empty")
        if key in found or name in names:
            raise ValueError(f"api_keys[{i}]: its key or name is given twice")
        found[key] = Principal(name, Role(role))
        names.add(name)
    return found


def principal_of(key: str, principals: dict[str, Principal]) -> Principal | None:
    """The principal of `key`, compared in constant time with every known key; None when it is
    none of them."""
    match = None
    for known, principal in principals.items():
        if hmac.compare_digest(key.encode(), known.encode()):
            match = principal
    return match
