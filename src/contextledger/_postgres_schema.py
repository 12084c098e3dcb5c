"""The tables and functions every Postgres store of contextledger keeps in its namespace, as
numbered migrations.

One namespace (a Postgres schema, ``contextledger`` unless told otherwise) holds everything: the
histories, their recorded turns, the facts and their trail, the proxy's session registry and its
locks, and ``contextledger_schema_version``, one row saying which migration the namespace is at.
:func:`~contextledger._postgres.ensure_schema` brings a namespace up to :data:`SCHEMA_VERSION`
by running, in one transaction, every migration above the version it finds; a migration is never
edited once released, a change of the schema is a new one appended to :data:`MIGRATIONS`.

Writes that must check something and change several rows in one atomic step (a turn: its id,
its messages, the rewrite the turn brings about, the writer's lock) are PL/pgSQL functions, so
each is one statement and one round trip, as a Lua script is on Redis.  ``{ns}`` in the text
below stands for the quoted namespace.
"""

from __future__ import annotations

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "VERSION_TABLE"]

VERSION_TABLE = "contextledger_schema_version"

_HISTORY = """
CREATE TABLE {ns}.contextledger_history_sessions (
    session_id TEXT PRIMARY KEY,
    generation BIGINT NOT NULL,
    length BIGINT NOT NULL
);
CREATE TABLE {ns}.contextledger_history (
    session_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (session_id, seq)
);
CREATE TABLE {ns}.contextledger_turns (
    session_id TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    record TEXT NOT NULL,
    recorded BIGSERIAL NOT NULL,
    PRIMARY KEY (session_id, turn_id)
);
CREATE TABLE {ns}.contextledger_fact_owners (
    owner TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    turn BIGINT NOT NULL
);
CREATE TABLE {ns}.contextledger_facts (
    owner TEXT NOT NULL,
    key TEXT NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (owner, key)
);
CREATE TABLE {ns}.contextledger_fact_trail (
    seq BIGSERIAL PRIMARY KEY,
    owner TEXT NOT NULL,
    key TEXT,
    has_value BOOLEAN NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX contextledger_fact_trail_owner ON {ns}.contextledger_fact_trail (owner, key) WHERE has_value;
CREATE INDEX contextledger_fact_trail_order ON {ns}.contextledger_fact_trail (owner, seq);
CREATE TABLE {ns}.contextledger_serve_sessions (
    session_key TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL
);
CREATE TABLE {ns}.contextledger_locks (
    lock_key TEXT PRIMARY KEY,
    token TEXT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);

-- The session's row, created if missing and locked for the rest of the transaction: every write
-- of a session goes through it, so a session's writers take turns while other sessions go on.
CREATE FUNCTION {ns}.contextledger_session_row(p_session TEXT, OUT generation BIGINT, OUT length BIGINT)
LANGUAGE sql AS $$
    INSERT INTO {ns}.contextledger_history_sessions AS s (session_id, generation, length)
    VALUES (p_session, 0, 0)
    ON CONFLICT (session_id) DO UPDATE SET generation = s.generation
    RETURNING s.generation, s.length
$$;

-- Puts p_bodies at positions p_first, p_first + 1, ... of the session.
CREATE FUNCTION {ns}.contextledger_put(p_session TEXT, p_first BIGINT, p_bodies TEXT[])
RETURNS VOID LANGUAGE sql AS $$
    INSERT INTO {ns}.contextledger_history (session_id, seq, body)
    SELECT p_session, p_first + position - 1, body FROM unnest(p_bodies) WITH ORDINALITY AS t(body, position)
$$;

-- Append (p_replace false) or make p_bodies the whole history (true; the generation moves on).
CREATE FUNCTION {ns}.contextledger_write(p_session TEXT, p_bodies TEXT[], p_replace BOOLEAN)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_generation BIGINT;
    v_length BIGINT;
BEGIN
    SELECT * INTO v_generation, v_length FROM {ns}.contextledger_session_row(p_session);
    IF p_replace THEN
        DELETE FROM {ns}.contextledger_history WHERE session_id = p_session;
        v_generation := v_generation + 1;
        v_length := 0;
    END IF;
    PERFORM {ns}.contextledger_put(p_session, v_length, p_bodies);
    UPDATE {ns}.contextledger_history_sessions
       SET generation = v_generation, length = v_length + cardinality(p_bodies)
     WHERE session_id = p_session;
END
$$;

-- Keeps the first p_start messages and puts p_bodies after them, if the session is still at
-- (p_generation, p_length); returns the new {generation, length}, or NULL (nothing written).
CREATE FUNCTION {ns}.contextledger_rewrite(
    p_session TEXT, p_start BIGINT, p_bodies TEXT[], p_generation BIGINT, p_length BIGINT
) RETURNS BIGINT[] LANGUAGE plpgsql AS $$
DECLARE
    v_generation BIGINT;
    v_length BIGINT;
BEGIN
    SELECT * INTO v_generation, v_length FROM {ns}.contextledger_session_row(p_session);
    IF v_generation <> p_generation OR v_length <> p_length THEN
        RETURN NULL;
    END IF;
    DELETE FROM {ns}.contextledger_history WHERE session_id = p_session AND seq >= p_start;
    PERFORM {ns}.contextledger_put(p_session, p_start, p_bodies);
    v_generation := v_generation + 1;
    v_length := p_start + cardinality(p_bodies);
    UPDATE {ns}.contextledger_history_sessions SET generation = v_generation, length = v_length
     WHERE session_id = p_session;
    RETURN ARRAY[v_generation, v_length];
END
$$;

-- A turn: refused ({-1}) unless the writer's lock (p_lock, p_token; NULL for none) still holds
-- its token and lease, skipped ({0}) if p_turn is recorded already, else recorded with its
-- messages ({1}), after the rewrite (p_start NULL for none) when the session is still at
-- (p_generation, p_length) ({1, generation, length}).  The lock row is read FOR SHARE: a
-- writer taking the lock over waits until this turn is committed, so turns never interleave.
CREATE FUNCTION {ns}.contextledger_append_turn(
    p_session TEXT, p_turn TEXT, p_record TEXT, p_bodies TEXT[], p_lock TEXT, p_token TEXT,
    p_start BIGINT, p_suffix TEXT[], p_generation BIGINT, p_length BIGINT
) RETURNS BIGINT[] LANGUAGE plpgsql AS $$
DECLARE
    v_generation BIGINT;
    v_length BIGINT;
    v_rewritten BOOLEAN := FALSE;
BEGIN
    IF p_lock IS NOT NULL THEN
        PERFORM 1 FROM {ns}.contextledger_locks
          WHERE lock_key = p_lock AND token = p_token AND expires_at > clock_timestamp() FOR SHARE;
        IF NOT FOUND THEN
            RETURN ARRAY[-1];
        END IF;
    END IF;
    INSERT INTO {ns}.contextledger_turns (session_id, turn_id, record) VALUES (p_session, p_turn, p_record)
    ON CONFLICT (session_id, turn_id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN ARRAY[0];
    END IF;
    SELECT * INTO v_generation, v_length FROM {ns}.contextledger_session_row(p_session);
    IF p_start IS NOT NULL AND v_generation = p_generation AND v_length = p_length THEN
        DELETE FROM {ns}.contextledger_history WHERE session_id = p_session AND seq >= p_start;
        PERFORM {ns}.contextledger_put(p_session, p_start, p_suffix);
        v_generation := v_generation + 1;
        v_length := p_start + cardinality(p_suffix);
        v_rewritten := TRUE;
    END IF;
    PERFORM {ns}.contextledger_put(p_session, v_length, p_bodies);
    v_length := v_length + cardinality(p_bodies);
    UPDATE {ns}.contextledger_history_sessions SET generation = v_generation, length = v_length
     WHERE session_id = p_session;
    IF v_rewritten THEN
        RETURN ARRAY[1, v_generation, v_length];
    END IF;
    RETURN ARRAY[1];
END
$$;

-- Forgets p_turn and removes the last contiguous copy of p_bodies from the session.
CREATE FUNCTION {ns}.contextledger_undo_turn(p_session TEXT, p_turn TEXT, p_bodies TEXT[])
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_generation BIGINT;
    v_length BIGINT;
    v_all TEXT[];
    v_size INT := cardinality(p_bodies);
    v_start INT;
BEGIN
    SELECT * INTO v_generation, v_length FROM {ns}.contextledger_session_row(p_session);
    DELETE FROM {ns}.contextledger_turns WHERE session_id = p_session AND turn_id = p_turn;
    IF v_size > 0 THEN
        SELECT coalesce(array_agg(body ORDER BY seq), '{}') INTO v_all
          FROM {ns}.contextledger_history WHERE session_id = p_session;
        FOR v_start IN REVERSE cardinality(v_all) - v_size + 1 .. 1 LOOP
            IF v_all[v_start : v_start + v_size - 1] = p_bodies THEN
                DELETE FROM {ns}.contextledger_history WHERE session_id = p_session;
                PERFORM {ns}.contextledger_put(p_session, 0, v_all[1 : v_start - 1] || v_all[v_start + v_size :]);
                v_length := v_length - v_size;
                EXIT;
            END IF;
        END LOOP;
    END IF;
    UPDATE {ns}.contextledger_history_sessions SET generation = v_generation + 1, length = v_length
     WHERE session_id = p_session;
END
$$;

-- Forgets the session's messages and turns; the generation moves on, never back.
CREATE FUNCTION {ns}.contextledger_clear(p_session TEXT)
RETURNS VOID LANGUAGE plpgsql AS $$
DECLARE
    v_generation BIGINT;
    v_length BIGINT;
BEGIN
    SELECT * INTO v_generation, v_length FROM {ns}.contextledger_session_row(p_session);
    DELETE FROM {ns}.contextledger_history WHERE session_id = p_session;
    DELETE FROM {ns}.contextledger_turns WHERE session_id = p_session;
    UPDATE {ns}.contextledger_history_sessions SET generation = v_generation + 1, length = 0
     WHERE session_id = p_session;
END
$$;
"""

MIGRATIONS: tuple[str, ...] = (_HISTORY,)
"""Migration ``n`` (counting from 1) is ``MIGRATIONS[n - 1]``: SQL run once per namespace, in order."""

SCHEMA_VERSION = len(MIGRATIONS)
"""The version a namespace is at once every migration this release knows has run."""
