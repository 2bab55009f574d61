-- Statements only the Postgres connector runs: the locks that stand in for SQLite's single
-- writer, the wake-up NOTIFY, and leader election. The store never names them.
-- Advisory lock keys: the two-int form with a class id per use, so the uses never collide with
-- each other or with anybody's one-bigint locks; hashtext spreads a name over the int4 space
-- (a collision only serialises two unrelated names briefly).

-- name: lock_migrations
-- Two processes starting on a fresh database apply the migrations one after the other.
SELECT pg_advisory_xact_lock(7311, hashtext('lakeshore-migrate:' || :schema));

-- name: lock_channel
-- append_frame computes MAX(seq) + 1: two concurrent posts to one channel would read the same
-- MAX under READ COMMITTED. Held to commit, so the next poster's statement sees this frame.
SELECT pg_advisory_xact_lock(7312, hashtext(:channel));

-- name: lock_admission
-- Admission counts the queue (or reads its token bucket) and then inserts: serialise the
-- submits of one queue that are checked against a limit, as SQLite's writer lock does.
SELECT pg_advisory_xact_lock(7313, hashtext(:ns || '/' || :queue));

-- name: notify
SELECT pg_notify(:channel, :payload);

-- name: other_listeners
-- The plane's listeners but the caller's own (`NotifyRelay`): their connections carry one
-- application_name, which pg_stat_activity shows to every role.
SELECT count(*) AS n FROM pg_stat_activity WHERE application_name = :app AND pid <> :own;

-- name: try_leader
-- Session-scoped: held until released or the session ends. Per schema, like everything else
-- (the URL's schema, which need not exist yet; else the search_path's first).
SELECT pg_try_advisory_lock(7314,
    hashtext(coalesce(CAST(:schema AS text), current_schema()::text, '') || ':' || :key));

-- name: release_leader
SELECT pg_advisory_unlock(7314,
    hashtext(coalesce(CAST(:schema AS text), current_schema()::text, '') || ':' || :key));
