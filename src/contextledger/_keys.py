"""Storage keys built from several ids, such that distinct ids never share a key.

A Redis key joins a namespace, a kind and an id (an owner, a session) with ``:``.  Joined
as they are, namespace ``a`` with session ``b:history:c`` and namespace ``a:history:b`` with
session ``c`` name the same list, so one tenant could read another's data.  Each part is
therefore escaped first: ``%`` becomes ``%25`` and ``:`` becomes ``%3A``.  An escaped part holds
no ``:``, so the parts can always be told apart again, and escaping is one-to-one, so distinct
parts stay distinct.  Ids without ``%`` or ``:`` (nearly all of them) keep the key they had
before escaping was introduced.

On a Redis Cluster the session part is a hash tag (:func:`slot_key`), so that all of one
session's keys share a slot; a single server keeps the keys it always had.
"""

from __future__ import annotations

__all__ = ["escape_key_part", "slot_key", "storage_key"]


def escape_key_part(part: str) -> str:
    """``part`` with ``%`` and ``:`` percent-encoded, so it can sit between ``:`` separators."""
    return part.replace("%", "%25").replace(":", "%3A")


def storage_key(*parts: str) -> str:
    """The key for ``parts``, each escaped, joined by ``:``; distinct part tuples give distinct keys."""
    return ":".join(escape_key_part(part) for part in parts)


def _escape_slot_part(part: str) -> str:
    return escape_key_part(part).replace("{", "%7B").replace("}", "%7D")


def slot_key(*parts: str, tag: str) -> str:
    """The key for ``parts`` and ``tag`` on a Redis Cluster: as :func:`storage_key`, with ``tag``
    (a session) last and in braces, its hash tag.  Redis Cluster hashes only the tag, so every key
    of one session lands in one slot and a script or transaction over them runs on one node.
    Braces in any part are escaped too (``%7B``, ``%7D``), so the tag is always the session's and
    distinct parts still give distinct keys."""
    return ":".join(_escape_slot_part(part) for part in parts) + ":{" + _escape_slot_part(tag) + "}"
