"""Who may spend the server's upstream key: the client keys file, kept as digests.

When the upstream key is the server's (``CONTEXTLEDGER_UPSTREAM_KEY``), anyone who reaches the
port would spend it; the client keys file (``--client-keys FILE``) names who may.  One key a line:
the key itself, or ``sha256:HEX`` of it (so the file need not hold the secret), optionally followed
by a space and the tenant's name.  A ``#`` at the start of a line or after a space begins a
comment (a key holding ``#`` elsewhere is read whole).  Keys are printable ASCII, as HTTP headers
carry them.

Only SHA-256 digests are kept.  A key is looked up by its digest and then compared again with
``hmac.compare_digest``, against a stand-in when nothing matched, so no answer takes a time that
depends on which key, if any, matched.  A named key puts its clients in the tenant of that name,
so a key rotated under the same name keeps the tenant's sessions; a key without a name is in the
tenant of its hash, the one it named before client keys existed.

The file is read whole or not at all: a malformed one refuses the start, naming the file and the
line, and on a reload (``SIGHUP``) it leaves the keys in force as they were, with one line in the
log.  Neither ever shows a key.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from contextledger.exceptions import ConfigurationError
from contextledger.serve._tenants import bearer_key, key_hash_tenant, named_tenant

__all__ = ["ClientKey", "ClientKeys", "parse_client_keys", "presented_key", "read_client_keys"]

_log = logging.getLogger("uvicorn.error")

MAX_TENANT_NAME = 128
_HASHED = "sha256:"
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")
_COMMENT = re.compile(r"(?:^|\s)#")
_STAND_IN = bytes(32)  # what a key that matched nothing is compared with


@dataclass(frozen=True, slots=True)
class ClientKey:
    """One admitted key: its SHA-256 ``digest``, the ``tenant`` its clients are in, and the ``line``
    of the file that named it."""

    digest: bytes
    tenant: str
    line: int


def parse_client_keys(text: str, path: str) -> dict[bytes, ClientKey]:
    """The keys ``text`` (the file at ``path``) names, by digest; :class:`ConfigurationError`
    naming the line for anything that is not a key (a key repeated, bad hexadecimal, a key or a
    name with characters a header or a line cannot carry)."""
    keys: dict[bytes, ClientKey] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        comment = _COMMENT.search(raw)
        line = (raw[: comment.start()] if comment else raw).strip()
        if not line:
            continue
        key, *rest = line.split(maxsplit=1)
        name = rest[0] if rest else ""

        def refuse(problem: str, at: int = number) -> ConfigurationError:
            return ConfigurationError(f"client keys file {path}, line {at}: {problem}")

        if key.startswith(_HASHED):
            hex_digest = key[len(_HASHED) :]
            if _HEX_DIGEST.fullmatch(hex_digest) is None:
                raise refuse(
                    f"{_HASHED} must be followed by the key's SHA-256 as 64 hexadecimal digits, got "
                    f"{len(hex_digest)} characters; write the digest `printf %s KEY | sha256sum` prints, or the key"
                )
            digest = bytes.fromhex(hex_digest)
        elif not (key.isascii() and key.isprintable()):
            raise refuse(
                "a key must be printable ASCII, as an HTTP header carries it; write sha256:HEX of it if it is not"
            )
        else:
            digest = hashlib.sha256(key.encode("ascii")).digest()
        if name and (not name.isprintable() or len(name) > MAX_TENANT_NAME):
            raise refuse(
                f"a tenant name must be 1 to {MAX_TENANT_NAME} printable characters (got {len(name)}); "
                "shorten it or drop the control characters"
            )
        if digest in keys:
            raise refuse(f"this key is already on line {keys[digest].line}; keep one of the two lines")
        tenant = named_tenant(name) if name else key_hash_tenant(digest.hex())
        keys[digest] = ClientKey(digest, tenant, number)
    return keys


def read_client_keys(path: str) -> dict[bytes, ClientKey]:
    """The keys in the file at ``path`` (see :func:`parse_client_keys`)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ConfigurationError(f"cannot read client keys file {path}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"client keys file {path} is not UTF-8 text; save it as UTF-8") from None
    return parse_client_keys(text, path)


def presented_key(headers: Mapping[str, str]) -> str | None:
    """The key a client presents: its bearer token, else its ``x-api-key`` (Anthropic's clients
    send that), the same on every route."""
    return bearer_key(headers) or headers.get("x-api-key", "").strip() or None


class ClientKeys:
    """The keys in force, read from ``path`` and read again on :meth:`reload`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._keys = read_client_keys(path)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def digests(self) -> frozenset[bytes]:
        return frozenset(self._keys)

    def admit(self, presented: str | None) -> ClientKey | None:
        """The entry for ``presented``, or ``None`` for a key the file does not hold (or no key)."""
        digest = hashlib.sha256((presented or "").encode("utf-8")).digest()
        found = self._keys.get(digest)
        matched = hmac.compare_digest(digest, found.digest if found is not None else _STAND_IN)
        return found if matched and presented is not None else None

    def reload(self) -> bool:
        """Read the file again: ``True`` with its keys in force, or ``False`` with the keys as they
        were when it cannot be read (one line in the log saying why)."""
        try:
            self._keys = read_client_keys(self.path)
        except ConfigurationError as error:
            _log.error("client keys not reloaded, the %d keys in force are kept: %s", len(self._keys), error)
            return False
        _log.info("client keys reloaded from %s: %d keys", self.path, len(self._keys))
        return True
