-- The plane's schema, as numbered migrations applied in order and recorded in schema_version.
-- One text for both dialects: {blob}, {real} and {serial} are filled in by the dialect.
-- A migration is never edited once released; a change is a new section.

-- migration: 1
CREATE TABLE IF NOT EXISTS namespaces (
    name        TEXT PRIMARY KEY,
    org         TEXT,
    created_at  {real} NOT NULL
);

CREATE TABLE IF NOT EXISTS queues (
    namespace    TEXT NOT NULL,
    name         TEXT NOT NULL,
    kind         TEXT NOT NULL DEFAULT 'fifo',
    state        TEXT NOT NULL DEFAULT 'active',
    description  TEXT NOT NULL DEFAULT '',
    elasticity   TEXT NOT NULL DEFAULT '{}',
    admission    TEXT NOT NULL DEFAULT '{}',
    created_at   {real} NOT NULL,
    updated_at   {real} NOT NULL,
    PRIMARY KEY (namespace, name)
);

CREATE TABLE IF NOT EXISTS invocations (
    id                TEXT PRIMARY KEY,
    namespace         TEXT NOT NULL,
    queue             TEXT NOT NULL,
    state             TEXT NOT NULL,
    priority          {real} NOT NULL DEFAULT 0,
    key               TEXT,
    payload           {blob},
    result            {blob},
    error             TEXT,
    attempt           INTEGER NOT NULL DEFAULT 0,
    max_attempts      INTEGER NOT NULL DEFAULT 3,
    timeout_s         {real},
    kill_requested    INTEGER NOT NULL DEFAULT 0,
    lease             TEXT,
    lease_expires_at  {real},
    worker            TEXT,
    not_before        {real} NOT NULL DEFAULT 0,
    created_at        {real} NOT NULL,
    started_at        {real},
    finished_at       {real}
);

-- Claims walk this index in claim order and stop at the first row; it holds only queued rows,
-- so it stays small however long the history grows.
CREATE INDEX IF NOT EXISTS invocations_claim
    ON invocations (namespace, queue, priority DESC, id) WHERE state = 'queued';
CREATE INDEX IF NOT EXISTS invocations_leases
    ON invocations (lease_expires_at) WHERE state = 'running';
CREATE INDEX IF NOT EXISTS invocations_state
    ON invocations (namespace, queue, state);
CREATE UNIQUE INDEX IF NOT EXISTS invocations_key
    ON invocations (namespace, queue, key) WHERE key IS NOT NULL;

CREATE TABLE IF NOT EXISTS frames (
    channel     TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    value       {blob},
    created_at  {real} NOT NULL,
    PRIMARY KEY (channel, seq)
);

CREATE TABLE IF NOT EXISTS workers (
    id            TEXT PRIMARY KEY,
    namespace     TEXT NOT NULL,
    name          TEXT NOT NULL,
    queues        TEXT NOT NULL DEFAULT '[]',
    host          TEXT,
    pid           INTEGER,
    info          TEXT NOT NULL DEFAULT '{}',
    load          TEXT NOT NULL DEFAULT '{}',
    state         TEXT NOT NULL DEFAULT 'alive',
    created_at    {real} NOT NULL,
    heartbeat_at  {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS workers_name ON workers (namespace, name);

CREATE TABLE IF NOT EXISTS queue_events (
    id          {serial},
    namespace   TEXT NOT NULL,
    queue       TEXT NOT NULL,
    at          {real} NOT NULL,
    kind        TEXT NOT NULL,
    detail      TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS queue_events_queue ON queue_events (namespace, queue, id);

CREATE TABLE IF NOT EXISTS tokens (
    hash        TEXT PRIMARY KEY,
    namespace   TEXT NOT NULL,
    label       TEXT NOT NULL DEFAULT '',
    created_at  {real} NOT NULL
);

-- migration: 2
-- Admission: a job's start deadline is fixed at submit from the queue's deadline_cutoff_s, so
-- claims and the sweep compare one column instead of reading every queue's policy.
ALTER TABLE invocations ADD COLUMN deadline_at {real};
CREATE INDEX IF NOT EXISTS invocations_deadline
    ON invocations (deadline_at) WHERE state = 'queued' AND deadline_at IS NOT NULL;

-- The token bucket behind admission.rate_limit, in the store so every replica shares it.
CREATE TABLE IF NOT EXISTS rate_buckets (
    namespace   TEXT NOT NULL,
    queue       TEXT NOT NULL,
    tokens      {real} NOT NULL,
    updated_at  {real} NOT NULL,
    PRIMARY KEY (namespace, queue)
);

-- migration: 3
-- Postgres storage for a churning queue (SQLite renders these lines as comments); the reasons
-- are in docs/postgres.md. invocations: each row is rewritten 3+ times (claim, renewals, settle)
-- and its claim index points at the few queued rows, so vacuum early and cheaply (1% dead, not
-- the default 20%), and leave 20% of each page free so a row's next version lands on its page.
-- frames: insert-mostly, trimmed by retention. workers: a heartbeat touches no indexed column,
-- so with free page space every heartbeat is a HOT update that writes no index.
{postgres_only} ALTER TABLE invocations SET (fillfactor = 80,
{postgres_only}     autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000,
{postgres_only}     autovacuum_analyze_scale_factor = 0.02, autovacuum_vacuum_cost_limit = 2000);
{postgres_only} ALTER TABLE frames SET (autovacuum_vacuum_scale_factor = 0.02,
{postgres_only}     autovacuum_vacuum_insert_scale_factor = 0.05);
{postgres_only} ALTER TABLE workers SET (fillfactor = 50, autovacuum_vacuum_scale_factor = 0.05);

-- migration: 12
-- Windowed reads of completions (the dashboard's throughput and latency sparklines) walk this
-- index instead of the whole history. Queued and running rows have no finished_at and stay out.
CREATE INDEX IF NOT EXISTS invocations_finished
    ON invocations (namespace, finished_at) WHERE finished_at IS NOT NULL;

-- migration: 10
-- Named provider configs (`lakeshore providers add`): where the controller and
-- `lakeshore daemon launch` start daemons. config is a JSON object of the provider's settings.
CREATE TABLE IF NOT EXISTS providers (
    namespace   TEXT NOT NULL,
    name        TEXT NOT NULL,
    kind        TEXT NOT NULL,
    config      TEXT NOT NULL DEFAULT '{}',
    created_at  {real} NOT NULL,
    updated_at  {real} NOT NULL,
    PRIMARY KEY (namespace, name)
);

-- migration: 11
-- Retention (issue 7): frames of ended invocations are trimmed by age, and this index lets the
-- trim read only the frames older than the cutoff.
CREATE INDEX IF NOT EXISTS frames_created ON frames (created_at);

-- migration: 13
-- Payload signatures (issue 11): the server's HMAC over namespace, queue, id and payload, made
-- when it accepts the submit with a key kept outside the store (sdk/signing.py); workers that
-- hold the key verify it before unpickling. NULL: accepted by a plane without a key.
ALTER TABLE invocations ADD COLUMN signature TEXT;

-- migration: 14
-- Admin tokens (issue 18): the controller, run against a server over HTTP, reads every
-- namespace's fleet and records its decisions; only a token created as admin may. The first
-- start's bootstrap token is one (the label 'admin' in namespace 'default' is how earlier
-- releases marked it).
ALTER TABLE tokens ADD COLUMN admin INTEGER NOT NULL DEFAULT 0;
UPDATE tokens SET admin = 1 WHERE label = 'admin' AND namespace = 'default';
-- One holder per leadership name, until it expires: how controllers that reach the plane over
-- HTTP elect one leader (those on the database hold an advisory lock or a file lock instead).
CREATE TABLE IF NOT EXISTS leader_leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    expires_at  {real} NOT NULL
);

-- migration: 15
-- Token scopes (issue 20, docs/security.md): what a token may do in its namespaces, as a
-- space-separated set. Every existing token keeps what it could do before (every namespace
-- scope); `admin` stays in its own column. A token without 'submit-code' cannot send the
-- workers anything they would unpickle or run as a shell command.
ALTER TABLE tokens ADD COLUMN scopes TEXT NOT NULL
    DEFAULT 'read submit-data submit-code work manage';

-- migration: 16
-- Locality (issue 15, docs/objects.md): the host whose tier holds a job's objects, as its
-- producer saw them (a hint it sends; the plane never decodes a payload), and until when a
-- claim from any other host passes the job by: submit time + the queue's
-- admission.locality_wait_s, fixed at submit as deadline_at is, so a claim compares columns of
-- the row it already reads. NULL locality_until: no hint or no wait; every claim takes it.
ALTER TABLE invocations ADD COLUMN locality_host TEXT;
ALTER TABLE invocations ADD COLUMN locality_until {real};
-- An idle claim asks when the next window ends, to wake then (sdk/plane/locality.py): this
-- index holds only queued rows still held for a host, so the question costs one probe.
CREATE INDEX IF NOT EXISTS invocations_locality
    ON invocations (namespace, queue, locality_until)
    WHERE state = 'queued' AND locality_until IS NOT NULL;

-- migration: 17
-- Token expiry (issue 19, docs/security.md): when a token stops opening anything, in epoch
-- seconds; NULL never expires, so every token made before this release keeps working. An expired
-- row is kept (tokens ls shows it, revoke removes it) and refused with 401 saying when it ended.
ALTER TABLE tokens ADD COLUMN expires_at {real};

-- migration: 18
-- Depth counters (issue 17): how many invocations each namespace, queue and state holds, kept by
-- triggers in the same transaction as every insert, state change and delete of an invocation,
-- so count(), len(), stats, the dashboard, /metrics and the controller read a few rows instead
-- of counting the queue (83 ms at 1M queued before), and no code path can forget to count.
-- A counter is striped over `shard` rows and a read sums them. On Postgres each writing
-- transaction adds to the stripe its txid picks (txid mod 8): concurrent submitters hold
-- consecutive txids, so they write different rows instead of queueing on one row lock, and a
-- transaction keeps to one stripe, so a batch never locks several. A stripe alone may go
-- negative (a job counted in on one stripe is counted out on another); only the sum means
-- anything. SQLite has one writer at a time: stripe 0 always.
CREATE TABLE IF NOT EXISTS queue_counts (
    namespace  TEXT NOT NULL,
    queue      TEXT NOT NULL,
    state      TEXT NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (namespace, queue, state, shard)
);
-- Every state change rewrites a counter row: leave half of each page free so the new version
-- is a HOT update on the same page, and vacuum the few rows often.
{postgres_only} ALTER TABLE queue_counts SET (fillfactor = 50,
{postgres_only}     autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);
-- Writers wait while the triggers appear and the counts are backfilled, so no change is
-- counted twice or missed (SQLite's BEGIN IMMEDIATE already holds them off).
{postgres_only} LOCK TABLE invocations IN SHARE ROW EXCLUSIVE MODE;

-- SQLite: UPDATE, and INSERT only when it found no row (changes() inside a trigger counts
-- the trigger's own last statement): about 2 us a row where an UPSERT costs 5.
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_count_insert
{sqlite_only} AFTER INSERT ON invocations
{sqlite_only} BEGIN
{sqlite_only}     UPDATE queue_counts SET n = n + 1
{sqlite_only}     WHERE namespace = NEW.namespace AND queue = NEW.queue AND state = NEW.state
{sqlite_only}         AND shard = 0;
{sqlite_only}     INSERT INTO queue_counts (namespace, queue, state, shard, n)
{sqlite_only}     SELECT NEW.namespace, NEW.queue, NEW.state, 0, 1 WHERE changes() = 0;
{sqlite_only} END;
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_count_update
{sqlite_only} AFTER UPDATE OF state, namespace, queue ON invocations
{sqlite_only} WHEN OLD.state IS NOT NEW.state OR OLD.namespace IS NOT NEW.namespace
{sqlite_only}     OR OLD.queue IS NOT NEW.queue
{sqlite_only} BEGIN
{sqlite_only}     UPDATE queue_counts SET n = n - 1
{sqlite_only}     WHERE namespace = OLD.namespace AND queue = OLD.queue AND state = OLD.state
{sqlite_only}         AND shard = 0;
{sqlite_only}     INSERT INTO queue_counts (namespace, queue, state, shard, n)
{sqlite_only}     SELECT OLD.namespace, OLD.queue, OLD.state, 0, -1 WHERE changes() = 0;
{sqlite_only}     UPDATE queue_counts SET n = n + 1
{sqlite_only}     WHERE namespace = NEW.namespace AND queue = NEW.queue AND state = NEW.state
{sqlite_only}         AND shard = 0;
{sqlite_only}     INSERT INTO queue_counts (namespace, queue, state, shard, n)
{sqlite_only}     SELECT NEW.namespace, NEW.queue, NEW.state, 0, 1 WHERE changes() = 0;
{sqlite_only} END;
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_count_delete
{sqlite_only} AFTER DELETE ON invocations
{sqlite_only} BEGIN
{sqlite_only}     UPDATE queue_counts SET n = n - 1
{sqlite_only}     WHERE namespace = OLD.namespace AND queue = OLD.queue AND state = OLD.state
{sqlite_only}         AND shard = 0;
{sqlite_only}     INSERT INTO queue_counts (namespace, queue, state, shard, n)
{sqlite_only}     SELECT OLD.namespace, OLD.queue, OLD.state, 0, -1 WHERE changes() = 0;
{sqlite_only} END;

-- Postgres: one function behind the three triggers. A state change writes its two counter rows
-- in (namespace, queue, state) order, whichever way it goes, so a claim (queued -> running) and
-- a retry (running -> queued) of one stripe take the two row locks in the same order and never
-- deadlock each other. `lakeshore.count_stripes` (a session setting, default 8) exists for the
-- benchmark (bench/depth_counts.py) to compare one stripe with eight; any mix stays exact.
{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_count_invocations() RETURNS trigger
{postgres_only} LANGUAGE plpgsql AS $$
{postgres_only} DECLARE
{postgres_only}     stripe integer := mod(txid_current(), coalesce(
{postgres_only}         nullif(current_setting('lakeshore.count_stripes', true), '')::integer, 8));
{postgres_only}     out_first boolean := TG_OP = 'UPDATE' AND
{postgres_only}         (OLD.namespace, OLD.queue, OLD.state) < (NEW.namespace, NEW.queue, NEW.state);
{postgres_only} BEGIN
{postgres_only}     IF TG_OP <> 'INSERT' AND (TG_OP = 'DELETE' OR out_first) THEN
{postgres_only}         INSERT INTO queue_counts AS c VALUES (OLD.namespace, OLD.queue, OLD.state, stripe, -1)
{postgres_only}         ON CONFLICT (namespace, queue, state, shard) DO UPDATE SET n = c.n - 1;
{postgres_only}     END IF;
{postgres_only}     IF TG_OP <> 'DELETE' THEN
{postgres_only}         INSERT INTO queue_counts AS c VALUES (NEW.namespace, NEW.queue, NEW.state, stripe, 1)
{postgres_only}         ON CONFLICT (namespace, queue, state, shard) DO UPDATE SET n = c.n + 1;
{postgres_only}     END IF;
{postgres_only}     IF TG_OP = 'UPDATE' AND NOT out_first THEN
{postgres_only}         INSERT INTO queue_counts AS c VALUES (OLD.namespace, OLD.queue, OLD.state, stripe, -1)
{postgres_only}         ON CONFLICT (namespace, queue, state, shard) DO UPDATE SET n = c.n - 1;
{postgres_only}     END IF;
{postgres_only}     RETURN NULL;
{postgres_only} END $$;
{postgres_only} CREATE TRIGGER invocations_count_insert AFTER INSERT ON invocations
{postgres_only}     FOR EACH ROW EXECUTE FUNCTION lakeshore_count_invocations();
{postgres_only} CREATE TRIGGER invocations_count_update AFTER UPDATE OF state, namespace, queue
{postgres_only}     ON invocations FOR EACH ROW
{postgres_only}     WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.namespace IS DISTINCT FROM
{postgres_only}         NEW.namespace OR OLD.queue IS DISTINCT FROM NEW.queue)
{postgres_only}     EXECUTE FUNCTION lakeshore_count_invocations();
{postgres_only} CREATE TRIGGER invocations_count_delete AFTER DELETE ON invocations
{postgres_only}     FOR EACH ROW EXECUTE FUNCTION lakeshore_count_invocations();

-- The rows already there, counted once (later changes are the triggers').
INSERT INTO queue_counts (namespace, queue, state, shard, n)
SELECT namespace, queue, state, 0, count(*) FROM invocations GROUP BY namespace, queue, state;

-- migration: 19
-- Listings by keyset (issue 17, item 2): `jobs ls`, `GET .../invocations` and the dashboard's
-- recent rows read newest first, filtered by nothing, a queue, a state or both, a page at a time
-- below the last id shown (the list_invocations* statements). Each combination has an index of
-- its equalities then id, so a page walks :limit entries backwards from where it starts however
-- deep the queue: no sort and no scan over the queue (2.3 s for 20 rows at 1M queued before).
-- The last one replaces invocations_state (namespace, queue, state), its prefix: it serves every
-- read that one did, and a submit or state change writes one index fewer.
CREATE INDEX IF NOT EXISTS invocations_listing ON invocations (namespace, id);
CREATE INDEX IF NOT EXISTS invocations_listing_queue ON invocations (namespace, queue, id);
CREATE INDEX IF NOT EXISTS invocations_listing_state ON invocations (namespace, state, id);
CREATE INDEX IF NOT EXISTS invocations_listing_queue_state
    ON invocations (namespace, queue, state, id);
DROP INDEX IF EXISTS invocations_state;

-- migration: 20
-- A post's own id (issue 20): the client mints one per frame, and the same post sent again
-- after its answer was lost (a restart, a dropped connection, a replica gone) finds the frame it
-- made instead of writing a second one. NULL for frames written before, and for the plane's own.
ALTER TABLE frames ADD COLUMN post_id TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS frames_post_id ON frames (channel, post_id)
    WHERE post_id IS NOT NULL;

-- migration: 21
-- Completion rollup (issue 17, item 3): the dashboard's throughput and latency figures, kept as
-- jobs end instead of read back from the last minutes of invocations (1.3-3.6 s per snapshot at
-- 1M queued before). A row counts the endings of one namespace, queue and second (`at`, epoch
-- seconds, floor of finished_at) that fell in one histogram bin of one kind:
--   kind 'latency': succeeded, bin of finished_at - created_at;
--   kind 'failed':  any other terminal state, bin 0;
--   kind 'wait':    every ending that started, bin of started_at - created_at.
-- A bin is a duration in microseconds to two significant digits: digits * 100 + the first two
-- digits (12345 us -> 512, i.e. [12000, 13000) us), so a percentile read from it is within 5%
-- of the exact one, both engines compute it with text functions alone, and the bins sort in
-- the order of the durations. A snapshot reads rows of its window only: queues x seconds x the
-- few bins used, whatever the depth or history. Retention drops rows older than a day (the
-- longest window the dashboard offers). Endings are counted once each: a retried job that ends
-- again is a second ending, and trimming an invocation leaves its ending counted.
-- Postgres stripes the rows as migration 18 does (the same txid mod stripes): a transaction's
-- first ending has already locked its counter stripe (the counter trigger fires first, by name),
-- so two transactions on one stripe of one queue reach these rows one after the other, and a
-- second's rollup rows never form a lock cycle that the counters would not.
CREATE TABLE IF NOT EXISTS queue_rollup (
    namespace  TEXT NOT NULL,
    at         BIGINT NOT NULL,
    queue      TEXT NOT NULL,
    kind       TEXT NOT NULL,
    bin        INTEGER NOT NULL,
    shard      INTEGER NOT NULL,
    n          BIGINT NOT NULL,
    PRIMARY KEY (namespace, at, queue, kind, bin, shard)
);
{postgres_only} ALTER TABLE queue_rollup SET (fillfactor = 50,
{postgres_only}     autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_threshold = 1000);

{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_rollup
{sqlite_only} AFTER UPDATE OF state ON invocations
{sqlite_only} WHEN OLD.state IN ('queued', 'running') AND NEW.finished_at IS NOT NULL
{sqlite_only}     AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only} BEGIN
{sqlite_only}     UPDATE queue_rollup SET n = n + 1
{sqlite_only}     WHERE namespace = NEW.namespace AND at = CAST(NEW.finished_at AS INTEGER)
{sqlite_only}         AND queue = NEW.queue
{sqlite_only}         AND kind = CASE WHEN NEW.state = 'succeeded' THEN 'latency' ELSE 'failed' END
{sqlite_only}         AND bin = CASE WHEN NEW.state = 'succeeded' THEN
{sqlite_only}             length(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER)
{sqlite_only}             ELSE 0 END
{sqlite_only}         AND shard = 0; -- not last after END: the splitter would end the trigger there
{sqlite_only}     INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{sqlite_only}     SELECT NEW.namespace, CAST(NEW.finished_at AS INTEGER), NEW.queue,
{sqlite_only}         CASE WHEN NEW.state = 'succeeded' THEN 'latency' ELSE 'failed' END,
{sqlite_only}         CASE WHEN NEW.state = 'succeeded' THEN
{sqlite_only}             length(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER)
{sqlite_only}             ELSE 0 END, 0, 1
{sqlite_only}     WHERE changes() = 0;
{sqlite_only}     UPDATE queue_rollup SET n = n + 1
{sqlite_only}     WHERE NEW.started_at IS NOT NULL AND namespace = NEW.namespace
{sqlite_only}         AND at = CAST(NEW.finished_at AS INTEGER) AND queue = NEW.queue
{sqlite_only}         AND kind = 'wait' AND shard = 0
{sqlite_only}         AND bin = length(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER);
{sqlite_only}     INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{sqlite_only}     SELECT NEW.namespace, CAST(NEW.finished_at AS INTEGER), NEW.queue, 'wait',
{sqlite_only}         length(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}         + CAST(substr(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER),
{sqlite_only}         0, 1
{sqlite_only}     WHERE NEW.started_at IS NOT NULL AND changes() = 0;
{sqlite_only} END;

{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_duration_bin(seconds double precision)
{postgres_only} RETURNS integer LANGUAGE sql IMMUTABLE AS $$
{postgres_only}     SELECT length(d) * 100 + CAST(substr(d, 1, 2) AS integer)
{postgres_only}     FROM (SELECT CAST(CAST(floor(greatest(0, seconds) * 1000000) AS bigint) AS text)) AS t(d)
{postgres_only} $$;
{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_rollup_invocations() RETURNS trigger
{postgres_only} LANGUAGE plpgsql AS $$
{postgres_only} DECLARE
{postgres_only}     stripe integer := mod(txid_current(), coalesce(
{postgres_only}         nullif(current_setting('lakeshore.count_stripes', true), '')::integer, 8));
{postgres_only}     second_at bigint := CAST(floor(NEW.finished_at) AS bigint);
{postgres_only} BEGIN
{postgres_only}     IF NEW.state = 'succeeded' THEN
{postgres_only}         INSERT INTO queue_rollup AS r VALUES (NEW.namespace, second_at, NEW.queue, 'latency',
{postgres_only}             lakeshore_duration_bin(NEW.finished_at - NEW.created_at), stripe, 1)
{postgres_only}         ON CONFLICT (namespace, at, queue, kind, bin, shard) DO UPDATE SET n = r.n + 1;
{postgres_only}     ELSE
{postgres_only}         INSERT INTO queue_rollup AS r VALUES (NEW.namespace, second_at, NEW.queue, 'failed', 0,
{postgres_only}             stripe, 1)
{postgres_only}         ON CONFLICT (namespace, at, queue, kind, bin, shard) DO UPDATE SET n = r.n + 1;
{postgres_only}     END IF;
{postgres_only}     IF NEW.started_at IS NOT NULL THEN
{postgres_only}         INSERT INTO queue_rollup AS r VALUES (NEW.namespace, second_at, NEW.queue, 'wait',
{postgres_only}             lakeshore_duration_bin(NEW.started_at - NEW.created_at), stripe, 1)
{postgres_only}         ON CONFLICT (namespace, at, queue, kind, bin, shard) DO UPDATE SET n = r.n + 1;
{postgres_only}     END IF;
{postgres_only}     RETURN NULL;
{postgres_only} END $$;
{postgres_only} CREATE TRIGGER invocations_rollup AFTER UPDATE OF state ON invocations
{postgres_only}     FOR EACH ROW
{postgres_only}     WHEN (OLD.state IN ('queued', 'running') AND NEW.finished_at IS NOT NULL
{postgres_only}         AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout'))
{postgres_only}     EXECUTE FUNCTION lakeshore_rollup_invocations();

-- The endings of the last day, counted once (later ones are the triggers').
{sqlite_only} INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{sqlite_only} SELECT namespace, at, queue, kind, bin, 0, count(*) FROM (
{sqlite_only}     SELECT namespace, CAST(finished_at AS INTEGER) AS at, queue,
{sqlite_only}         CASE WHEN state = 'succeeded' THEN 'latency' ELSE 'failed' END AS kind,
{sqlite_only}         CASE WHEN state = 'succeeded' THEN
{sqlite_only}             length(CAST(CAST(max(0, finished_at - created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, finished_at - created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER)
{sqlite_only}             ELSE 0 END AS bin
{sqlite_only}     FROM invocations
{sqlite_only}     WHERE finished_at >= CAST(strftime('%s', 'now') AS INTEGER) - 86400
{sqlite_only}         AND state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only}     UNION ALL
{sqlite_only}     SELECT namespace, CAST(finished_at AS INTEGER), queue, 'wait',
{sqlite_only}         length(CAST(CAST(max(0, started_at - created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}         + CAST(substr(CAST(CAST(max(0, started_at - created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER)
{sqlite_only}     FROM invocations
{sqlite_only}     WHERE finished_at >= CAST(strftime('%s', 'now') AS INTEGER) - 86400
{sqlite_only}         AND started_at IS NOT NULL
{sqlite_only}         AND state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only} ) AS endings GROUP BY namespace, at, queue, kind, bin;
{postgres_only} INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{postgres_only} SELECT namespace, at, queue, kind, bin, 0, count(*) FROM (
{postgres_only}     SELECT namespace, CAST(floor(finished_at) AS bigint) AS at, queue,
{postgres_only}         CASE WHEN state = 'succeeded' THEN 'latency' ELSE 'failed' END AS kind,
{postgres_only}         CASE WHEN state = 'succeeded'
{postgres_only}             THEN lakeshore_duration_bin(finished_at - created_at) ELSE 0 END AS bin
{postgres_only}     FROM invocations
{postgres_only}     WHERE finished_at >= extract(epoch FROM now()) - 86400
{postgres_only}         AND state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{postgres_only}     UNION ALL
{postgres_only}     SELECT namespace, CAST(floor(finished_at) AS bigint), queue, 'wait',
{postgres_only}         lakeshore_duration_bin(started_at - created_at)
{postgres_only}     FROM invocations
{postgres_only}     WHERE finished_at >= extract(epoch FROM now()) - 86400 AND started_at IS NOT NULL
{postgres_only}         AND state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{postgres_only} ) AS endings GROUP BY namespace, at, queue, kind, bin;

-- migration: 22
-- The objects a submit made that its payload names only from inside a pickle (issue 15): a
-- thunk's big array arguments, spilled one by one. The plane never unpickles a payload, so it
-- cannot find them there; the producer lists them here (JSON: [{url, key, size}]) and
-- retention deletes them with the row. NULL when there are none.
ALTER TABLE invocations ADD COLUMN objects TEXT;

-- migration: 23
-- Postgres: the duration bin as one expression, which the planner inlines into the rollup
-- trigger's inserts. Its body had a FROM clause, which cannot be inlined, so every ending ran
-- the function through the SQL-function executor twice, setting it up anew each time: 0.1-0.15
-- ms of the trigger's 0.13-0.2 ms (EXPLAIN ANALYZE of a settle: the trigger now takes 0.03 ms).
-- The same bins, to the digit. SQLite's triggers spell the expression out already.
{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_duration_bin(seconds double precision)
{postgres_only} RETURNS integer LANGUAGE sql IMMUTABLE AS $$
{postgres_only}     SELECT length(CAST(CAST(floor(greatest(0, seconds) * 1000000) AS bigint) AS text)) * 100
{postgres_only}         + CAST(substr(CAST(CAST(floor(greatest(0, seconds) * 1000000) AS bigint) AS text), 1, 2)
{postgres_only}             AS integer)
{postgres_only} $$;

-- migration: 24
-- GPUs as a schedulable resource (issue 34, sdk/resources.py). `resources` is what the job
-- asked for (JSON, after the udf's and the queue's defaults; NULL: nothing stated); the four
-- numbers and the type pattern beside it are the same request as columns a claim compares on
-- the row its walk reads anyway (the `fits` fragment), NULL where the request says nothing.
-- `placement` is where an attempt runs (JSON: worker, GPU indexes, UUIDs and names), written by
-- the daemon under the attempt's lease. `pending_reason` and `unschedulable_reason` are what the
-- sweep found about a queued job no live daemon of its queue could run (machine word / words).
-- A queue's `resources` is the request of a job submitted to it without one.
ALTER TABLE invocations ADD COLUMN resources TEXT;
ALTER TABLE invocations ADD COLUMN gpus {real};
ALTER TABLE invocations ADD COLUMN gpu_type TEXT;
ALTER TABLE invocations ADD COLUMN gpu_memory_gb {real};
ALTER TABLE invocations ADD COLUMN cpus {real};
ALTER TABLE invocations ADD COLUMN memory_gb {real};
ALTER TABLE invocations ADD COLUMN placement TEXT;
ALTER TABLE invocations ADD COLUMN pending_reason TEXT;
ALTER TABLE invocations ADD COLUMN unschedulable_reason TEXT;
ALTER TABLE queues ADD COLUMN resources TEXT NOT NULL DEFAULT '{}';
-- What the unschedulable sweep reads (store/schedulable.py): the shapes of queued jobs that
-- state a request, per queue, and how many of each carry which pending reason; only those rows,
-- so a queue of plain jobs costs it nothing however deep.
CREATE INDEX IF NOT EXISTS invocations_shapes ON invocations
    (namespace, queue, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb, pending_reason)
    WHERE state = 'queued' AND resources IS NOT NULL;
-- migration: 25
-- Preemption and checkpoints (issue 35). A preemption (a notice the box is going away, a
-- worker that vanished with the job's lease) is not the job's failure: it is counted in
-- `preemptions`, apart from `attempt`, and only `max_preemptions` of them are allowed (a job
-- that can never finish still ends). `attempt - preemptions` is what counts against
-- max_attempts. `ended_by` is why the last attempt ended as the worker decided it before it
-- signalled the job (notice, cancel, timeout, died, error, daemon_lost, exit75), never guessed
-- from how the process died. `checkpoint` is the job's last checkpoint: the encoded spilled
-- Ref of an object in durable storage (a few hundred bytes), never the state itself.
ALTER TABLE invocations ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
ALTER TABLE invocations ADD COLUMN max_preemptions INTEGER NOT NULL DEFAULT 20;
ALTER TABLE invocations ADD COLUMN ended_by TEXT;
ALTER TABLE invocations ADD COLUMN checkpoint {blob};
-- migration: 27
-- Map (issue 36, sdk/mapping.py): the jobs of one `f.map(...)` carry its id, so `lakeshore jobs
-- ls --map ID`, `GET .../invocations?map=ID` and the dashboard list them. NULL for every other
-- job; the index holds only mapped rows and serves the listing as the listing indexes of
-- migration 19 do (equalities, then id).
ALTER TABLE invocations ADD COLUMN map_id TEXT;
CREATE INDEX IF NOT EXISTS invocations_map
    ON invocations (namespace, map_id, id) WHERE map_id IS NOT NULL;

-- migration: 32
-- Delays (issue 36, sdk/workflow.py): a job submitted with delay_s / at waits in state
-- 'scheduled' with its due time in not_before (the column retries already use) until a claim
-- or the sweep promotes it to queued. Both indexes hold scheduled rows only: a claim asks when
-- its queues' next one is due (and promotes those due) by the first, the sweep every
-- namespace's by the second.
CREATE INDEX IF NOT EXISTS invocations_scheduled_queue
    ON invocations (namespace, queue, not_before) WHERE state = 'scheduled';
CREATE INDEX IF NOT EXISTS invocations_scheduled
    ON invocations (not_before) WHERE state = 'scheduled';

-- migration: 26
-- Dependencies (issue 36 item 4, sdk/plane/dependencies.py): a job submitted with `after` waits
-- in state 'waiting' until its parents end. One edge a parent and child; parent_state is the
-- parent's terminal state once it ended (NULL while it runs), so an edge is counted once even
-- when a failed parent is retried and ends again. On the child: open_parents, how many of its
-- parents have not ended (the join counter: each parent's settle takes one off, under the
-- child's row lock, in its own transaction, and the one that takes the last releases it);
-- after_failure ('run', or NULL: cancel); inputs, the parents whose results its arguments
-- name (`dls.output`), as a JSON list. On the parent: dependents, how many edges name it
-- (NULL: none), so the trigger below costs nothing on the jobs no one waits for.
CREATE TABLE IF NOT EXISTS dependencies (
    parent       TEXT NOT NULL,
    child        TEXT NOT NULL,
    parent_state TEXT,
    PRIMARY KEY (parent, child)
);
CREATE INDEX IF NOT EXISTS dependencies_child ON dependencies (child);
ALTER TABLE invocations ADD COLUMN open_parents INTEGER;
ALTER TABLE invocations ADD COLUMN after_failure TEXT;
ALTER TABLE invocations ADD COLUMN dependents INTEGER;
ALTER TABLE invocations ADD COLUMN inputs TEXT;
-- The sweep's safety net walks the waiting rows (dependencies.py): only those are indexed.
CREATE INDEX IF NOT EXISTS invocations_waiting ON invocations (id) WHERE state = 'waiting';

-- A parent that ends settles its waiting children in the same transaction, whichever statement
-- ended it (an ack, a nack, a kill, a timeout, a lost lease, a cancel, a deleted queue): the
-- trigger is the one place, so no settle path can forget it. Succeeded (or any end, for a
-- child with after_failure = 'run'): one open parent fewer; the last one makes the child
-- queued, or scheduled while its own delay runs, its start deadline moved on by the time it
-- waited. Any other end: the child is cancelled naming the parent, and that change fires this
-- trigger on the child in turn, so the cancellation runs down every waiting descendant (SQLite
-- needs recursive_triggers on: sqlite.py sets it). The parent's time of ending is "now".
-- The statements are the same text in both dialects; only the wrapper differs.
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_settle_dependents
{sqlite_only} AFTER UPDATE OF state ON invocations
{sqlite_only} WHEN NEW.dependents IS NOT NULL
{sqlite_only}     AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only}     AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only} BEGIN
{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_settle_dependents() RETURNS trigger
{postgres_only} LANGUAGE plpgsql AS $$
{postgres_only} BEGIN
    UPDATE invocations SET
        open_parents = open_parents - 1,
        state = CASE
            WHEN NEW.state <> 'succeeded' AND after_failure IS NULL THEN 'cancelled'
            WHEN open_parents > 1 THEN 'waiting'
            WHEN not_before > COALESCE(NEW.finished_at, NEW.created_at) THEN 'scheduled'
            ELSE 'queued' END,
        error = CASE WHEN NEW.state <> 'succeeded' AND after_failure IS NULL
            THEN 'parent ' || NEW.id || ' ended ' || NEW.state
                || ', so this dependent did not run (after_failure=cancel)'
            ELSE error END,
        finished_at = CASE WHEN NEW.state <> 'succeeded' AND after_failure IS NULL
            THEN COALESCE(NEW.finished_at, NEW.created_at) ELSE finished_at END,
        deadline_at = CASE WHEN deadline_at IS NULL OR open_parents > 1
                OR (NEW.state <> 'succeeded' AND after_failure IS NULL) THEN deadline_at
            ELSE deadline_at
                + CASE WHEN COALESCE(NEW.finished_at, NEW.created_at) > not_before
                    THEN COALESCE(NEW.finished_at, NEW.created_at) ELSE not_before END
                - CASE WHEN created_at > not_before THEN created_at ELSE not_before END END
    WHERE state = 'waiting' AND id IN (
        SELECT child FROM dependencies WHERE parent = NEW.id AND parent_state IS NULL);
    UPDATE dependencies SET parent_state = NEW.state
    WHERE parent = NEW.id AND parent_state IS NULL;
{sqlite_only} END;
{postgres_only}     RETURN NULL;
{postgres_only} END $$;
{postgres_only} CREATE TRIGGER invocations_settle_dependents AFTER UPDATE OF state ON invocations
{postgres_only}     FOR EACH ROW
{postgres_only}     WHEN (NEW.dependents IS NOT NULL
{postgres_only}         AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{postgres_only}         AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout'))
{postgres_only}     EXECUTE FUNCTION lakeshore_settle_dependents();
-- A child's edges go with it (retention, a deleted queue); a parent's stay, ended, so a child
-- still shows what it waited on.
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_drop_dependencies
{sqlite_only} AFTER DELETE ON invocations WHEN OLD.open_parents IS NOT NULL
{sqlite_only} BEGIN
{sqlite_only}     DELETE FROM dependencies WHERE child = OLD.id;
{sqlite_only} END;
{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_drop_dependencies() RETURNS trigger
{postgres_only} LANGUAGE plpgsql AS $$
{postgres_only} BEGIN
{postgres_only}     DELETE FROM dependencies WHERE child = OLD.id;
{postgres_only}     RETURN NULL;
{postgres_only} END $$;
{postgres_only} CREATE TRIGGER invocations_drop_dependencies AFTER DELETE ON invocations
{postgres_only}     FOR EACH ROW WHEN (OLD.open_parents IS NOT NULL)
{postgres_only}     EXECUTE FUNCTION lakeshore_drop_dependencies();
-- migration: 29
-- Cron schedules (issue 36, item 3; sdk/plane/schedules.py). A row is a cron expression in a
-- time zone and the job it submits, stored as the submit would be (payload bytes, priority,
-- attempts, timeout, resources, preemptions). Firing is one transaction per slot that moves
-- next_fire_at on and submits the job keyed schedule:<name>:<slot> (store/schedules.py), so
-- every server and embedded process may fire and a slot still fires once. last_job is what
-- overlap 'skip' watches; fired and missed count slots. The index holds active rows only: the
-- sweep's question "is anything due?" is one probe of it.
CREATE TABLE IF NOT EXISTS schedules (
    namespace       TEXT NOT NULL,
    name            TEXT NOT NULL,
    queue           TEXT NOT NULL,
    cron            TEXT NOT NULL,
    tz              TEXT NOT NULL,
    catchup         TEXT NOT NULL,
    overlap         TEXT NOT NULL,
    state           TEXT NOT NULL,
    payload         {blob} NOT NULL,
    priority        {real} NOT NULL,
    max_attempts    INTEGER NOT NULL,
    timeout_s       {real},
    resources       TEXT,
    max_preemptions INTEGER,
    next_fire_at    {real} NOT NULL,
    last_slot       {real},
    last_fired_at   {real},
    last_job        TEXT,
    fired           BIGINT NOT NULL DEFAULT 0,
    missed          BIGINT NOT NULL DEFAULT 0,
    last_error      TEXT,
    created_at      {real} NOT NULL,
    updated_at      {real} NOT NULL,
    PRIMARY KEY (namespace, name)
);
CREATE INDEX IF NOT EXISTS schedules_due ON schedules (next_fire_at) WHERE state = 'active';

-- migration: 34
-- A job a preemption requeued (issue 35: a notice, its worker lost, a command exiting 75, a GPU
-- that failed) is taken next among its priority on every queue kind. Fifo and boltzmann take
-- the oldest first, and its id already does it; on a filo queue its id would put it behind
-- everything submitted since, so a filo claim looks here first (store/preemption.py,
-- `_resumed`): the index holds only such queued rows, empty on most planes, and the look costs
-- a claim one probe of an empty tree. `ended_by` says it until the next end.
CREATE INDEX IF NOT EXISTS invocations_resumed
    ON invocations (namespace, queue, priority DESC, id)
    WHERE state = 'queued' AND ended_by IN ('notice', 'daemon_lost', 'exit75', 'gpu_failed');

-- migration: 35
-- Pending reasons move off the invocation rows (store/schedulable.py). Claims pick with
-- `FOR UPDATE SKIP LOCKED` on PostgreSQL, so while the sweep's transaction held the rows whose
-- reason it rewrote, a claim that fitted such a job passed it over and returned nothing. The
-- sweep now writes here, a table no claim locks; an invocation shows its row's reason only
-- while it is queued, and the sweep deletes the rows of jobs that left the queue. `at` is when
-- the reason was written: a sweep leaves a worker's reservation mark newer than its own start
-- alone (its view of the live workers may predate that worker). The two columns of migration
-- 24 stay, unused: dropping them would rewrite every invocation.
CREATE TABLE IF NOT EXISTS pending_reasons (
    id        TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    queue     TEXT NOT NULL,
    reason    TEXT NOT NULL,
    words     TEXT,
    at        {real} NOT NULL
);
CREATE INDEX IF NOT EXISTS pending_reasons_by_queue ON pending_reasons (namespace, queue, reason);
INSERT INTO pending_reasons (id, namespace, queue, reason, words, at)
SELECT id, namespace, queue, pending_reason, unschedulable_reason, 0 FROM invocations
WHERE state = 'queued' AND pending_reason IS NOT NULL;

-- migration: 36
-- Issue 45, item 9. (a) The rollup counted an ending only from queued or running, so a job
-- cancelled while scheduled (a delay) or waiting (its parents; the cascade of a failed parent
-- too) ended uncounted, and so did a child stored cancelled at submit (a parent had failed
-- already): every ending from a live state counts now, an inserted one as well, and the
-- endings of the last day that were missed are added (the rollup keeps the larger of what it
-- counted and what the rows still say: a trimmed row or a retried job's earlier ending is
-- counted and not in the rows, so neither figure alone is the truth, but neither overcounts).
-- (b) A failed parent's cancellation ran down its chain of dependents by the trigger firing on
-- each child in turn, one level of nesting a generation: SQLite refuses the 1,001st level ("too
-- many levels of trigger recursion") and Postgres ran out of stack near 1,500, so a deep chain
-- could not be cancelled at all. The settle now finds every waiting dependent the failure dooms
-- in one recursive query (`doomed`: children that cancel on failure, and theirs, as deep as
-- they go), ends their edges, releases or counts down the after_failure='run' children they
-- had, and cancels them, then settles its own children as before. Nothing is left for a
-- nested firing to do (on SQLite none happens: sqlite.py turns recursive_triggers off), so
-- the depth of a chain costs rows, not nesting.
{sqlite_only} DROP TRIGGER IF EXISTS invocations_rollup;
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_rollup
{sqlite_only} AFTER UPDATE OF state ON invocations
{sqlite_only} WHEN OLD.state IN ('queued', 'running', 'scheduled', 'waiting')
{sqlite_only}     AND NEW.finished_at IS NOT NULL
{sqlite_only}     AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only} BEGIN
{sqlite_only}     UPDATE queue_rollup SET n = n + 1
{sqlite_only}     WHERE namespace = NEW.namespace AND at = CAST(NEW.finished_at AS INTEGER)
{sqlite_only}         AND queue = NEW.queue
{sqlite_only}         AND kind = CASE WHEN NEW.state = 'succeeded' THEN 'latency' ELSE 'failed' END
{sqlite_only}         AND bin = CASE WHEN NEW.state = 'succeeded' THEN
{sqlite_only}             length(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER)
{sqlite_only}             ELSE 0 END
{sqlite_only}         AND shard = 0; -- not last after END: the splitter would end the trigger there
{sqlite_only}     INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{sqlite_only}     SELECT NEW.namespace, CAST(NEW.finished_at AS INTEGER), NEW.queue,
{sqlite_only}         CASE WHEN NEW.state = 'succeeded' THEN 'latency' ELSE 'failed' END,
{sqlite_only}         CASE WHEN NEW.state = 'succeeded' THEN
{sqlite_only}             length(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, NEW.finished_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER)
{sqlite_only}             ELSE 0 END, 0, 1
{sqlite_only}     WHERE changes() = 0;
{sqlite_only}     UPDATE queue_rollup SET n = n + 1
{sqlite_only}     WHERE NEW.started_at IS NOT NULL AND namespace = NEW.namespace
{sqlite_only}         AND at = CAST(NEW.finished_at AS INTEGER) AND queue = NEW.queue
{sqlite_only}         AND kind = 'wait' AND shard = 0
{sqlite_only}         AND bin = length(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}             + CAST(substr(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER);
{sqlite_only}     INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{sqlite_only}     SELECT NEW.namespace, CAST(NEW.finished_at AS INTEGER), NEW.queue, 'wait',
{sqlite_only}         length(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT)) * 100
{sqlite_only}         + CAST(substr(CAST(CAST(max(0, NEW.started_at - NEW.created_at) * 1000000 AS INTEGER) AS TEXT), 1, 2) AS INTEGER),
{sqlite_only}         0, 1
{sqlite_only}     WHERE NEW.started_at IS NOT NULL AND changes() = 0;
{sqlite_only} END;
-- A job stored already ended (a dependent of a parent that had failed) never started and
-- did not succeed: one 'failed' ending.
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_rollup_insert
{sqlite_only} AFTER INSERT ON invocations
{sqlite_only} WHEN NEW.finished_at IS NOT NULL
{sqlite_only}     AND NEW.state IN ('failed', 'cancelled', 'killed', 'timeout')
{sqlite_only} BEGIN
{sqlite_only}     UPDATE queue_rollup SET n = n + 1
{sqlite_only}     WHERE namespace = NEW.namespace AND at = CAST(NEW.finished_at AS INTEGER)
{sqlite_only}         AND queue = NEW.queue AND kind = 'failed' AND bin = 0 AND shard = 0;
{sqlite_only}     INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
{sqlite_only}     SELECT NEW.namespace, CAST(NEW.finished_at AS INTEGER), NEW.queue, 'failed', 0, 0, 1
{sqlite_only}     WHERE changes() = 0;
{sqlite_only} END;
{postgres_only} DROP TRIGGER IF EXISTS invocations_rollup ON invocations;
{postgres_only} CREATE TRIGGER invocations_rollup AFTER UPDATE OF state ON invocations
{postgres_only}     FOR EACH ROW
{postgres_only}     WHEN (OLD.state IN ('queued', 'running', 'scheduled', 'waiting')
{postgres_only}         AND NEW.finished_at IS NOT NULL
{postgres_only}         AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout'))
{postgres_only}     EXECUTE FUNCTION lakeshore_rollup_invocations();
{postgres_only} CREATE TRIGGER invocations_rollup_insert AFTER INSERT ON invocations
{postgres_only}     FOR EACH ROW
{postgres_only}     WHEN (NEW.finished_at IS NOT NULL
{postgres_only}         AND NEW.state IN ('failed', 'cancelled', 'killed', 'timeout'))
{postgres_only}     EXECUTE FUNCTION lakeshore_rollup_invocations();

-- The missed endings of the last day: per queue and second, what the rows say beyond what the
-- rollup counted, added to stripe 0.
INSERT INTO queue_rollup (namespace, at, queue, kind, bin, shard, n)
SELECT e.namespace, e.at, e.queue, 'failed', 0, 0, e.n - COALESCE(r.n, 0)
FROM (
{sqlite_only}     SELECT namespace, CAST(finished_at AS INTEGER) AS at, queue, count(*) AS n
{sqlite_only}     FROM invocations
{sqlite_only}     WHERE finished_at >= CAST(strftime('%s', 'now') AS INTEGER) - 86400
{postgres_only}     SELECT namespace, CAST(floor(finished_at) AS bigint) AS at, queue, count(*) AS n
{postgres_only}     FROM invocations
{postgres_only}     WHERE finished_at >= extract(epoch FROM now()) - 86400
        AND state IN ('failed', 'cancelled', 'killed', 'timeout')
    GROUP BY 1, 2, 3
) AS e LEFT JOIN (
    SELECT namespace, at, queue, sum(n) AS n FROM queue_rollup WHERE kind = 'failed'
    GROUP BY namespace, at, queue
) AS r ON r.namespace = e.namespace AND r.at = e.at AND r.queue = e.queue
WHERE e.n > COALESCE(r.n, 0)
ON CONFLICT (namespace, at, queue, kind, bin, shard) DO UPDATE SET n = queue_rollup.n + EXCLUDED.n;
-- The edges a settle is ending, for the moment between marking and counting them down
-- (empty outside a settle's transaction).
CREATE INDEX IF NOT EXISTS dependencies_cancelling ON dependencies (child)
    WHERE parent_state = 'cancelling';
{sqlite_only} DROP TRIGGER IF EXISTS invocations_settle_dependents;
{sqlite_only} CREATE TRIGGER IF NOT EXISTS invocations_settle_dependents
{sqlite_only} AFTER UPDATE OF state ON invocations
{sqlite_only} WHEN NEW.dependents IS NOT NULL
{sqlite_only}     AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only}     AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{sqlite_only} BEGIN
{postgres_only} CREATE OR REPLACE FUNCTION lakeshore_settle_dependents() RETURNS trigger
{postgres_only} LANGUAGE plpgsql AS $$
{postgres_only} BEGIN
    -- the doomed's own edges end ('cancelling' until their children are counted down)
    UPDATE dependencies SET parent_state = 'cancelling'
    WHERE parent_state IS NULL AND parent IN (
        WITH RECURSIVE doomed(id) AS (
            SELECT d.child FROM dependencies d JOIN invocations c ON c.id = d.child
            WHERE NEW.state <> 'succeeded' AND d.parent = NEW.id AND d.parent_state IS NULL
                AND c.state = 'waiting' AND c.after_failure IS NULL
            UNION
            SELECT d.child FROM doomed JOIN dependencies d ON d.parent = doomed.id
                JOIN invocations c ON c.id = d.child
            WHERE c.state = 'waiting' AND c.after_failure IS NULL)
        SELECT id FROM doomed);
    -- their after_failure='run' children: one open parent fewer for each doomed one
    UPDATE invocations SET
        open_parents = open_parents - (SELECT count(*) FROM dependencies d
            WHERE d.child = invocations.id AND d.parent_state = 'cancelling'),
        state = CASE WHEN open_parents > (SELECT count(*) FROM dependencies d
            WHERE d.child = invocations.id AND d.parent_state = 'cancelling') THEN 'waiting'
            WHEN not_before > COALESCE(NEW.finished_at, NEW.created_at) THEN 'scheduled'
            ELSE 'queued' END,
        deadline_at = CASE WHEN deadline_at IS NULL OR open_parents > (SELECT count(*) FROM dependencies d
            WHERE d.child = invocations.id AND d.parent_state = 'cancelling') THEN deadline_at
            ELSE deadline_at
                + CASE WHEN COALESCE(NEW.finished_at, NEW.created_at) > not_before
                    THEN COALESCE(NEW.finished_at, NEW.created_at) ELSE not_before END
                - CASE WHEN created_at > not_before THEN created_at ELSE not_before END END
    WHERE state = 'waiting' AND after_failure IS NOT NULL AND id IN (
        SELECT child FROM dependencies WHERE parent_state = 'cancelling');
    UPDATE dependencies SET parent_state = 'cancelled' WHERE parent_state = 'cancelling';
    -- the doomed below this job's own children, cancelled naming a cancelled parent
    UPDATE invocations SET
        state = 'cancelled',
        error = 'parent ' || (SELECT min(d.parent) FROM dependencies d
                WHERE d.child = invocations.id AND d.parent_state = 'cancelled')
            || ' ended cancelled, so this dependent did not run (after_failure=cancel)',
        finished_at = COALESCE(NEW.finished_at, NEW.created_at)
    WHERE state = 'waiting' AND after_failure IS NULL
        AND id NOT IN (SELECT child FROM dependencies WHERE parent = NEW.id)
        AND id IN (
            WITH RECURSIVE doomed(id) AS (
                SELECT d.child FROM dependencies d JOIN invocations c ON c.id = d.child
                WHERE NEW.state <> 'succeeded' AND d.parent = NEW.id AND d.parent_state IS NULL
                    AND c.state = 'waiting' AND c.after_failure IS NULL
                UNION
                SELECT d.child FROM doomed JOIN dependencies d ON d.parent = doomed.id
                    JOIN invocations c ON c.id = d.child
                WHERE c.state = 'waiting' AND c.after_failure IS NULL)
            SELECT id FROM doomed);
    -- then this job's own children, as migration 26 settled them
    UPDATE invocations SET
        open_parents = open_parents - 1,
        state = CASE
            WHEN NEW.state <> 'succeeded' AND after_failure IS NULL THEN 'cancelled'
            WHEN open_parents > 1 THEN 'waiting'
            WHEN not_before > COALESCE(NEW.finished_at, NEW.created_at) THEN 'scheduled'
            ELSE 'queued' END,
        error = CASE WHEN NEW.state <> 'succeeded' AND after_failure IS NULL
            THEN 'parent ' || NEW.id || ' ended ' || NEW.state
                || ', so this dependent did not run (after_failure=cancel)'
            ELSE error END,
        finished_at = CASE WHEN NEW.state <> 'succeeded' AND after_failure IS NULL
            THEN COALESCE(NEW.finished_at, NEW.created_at) ELSE finished_at END,
        deadline_at = CASE WHEN deadline_at IS NULL OR open_parents > 1
                OR (NEW.state <> 'succeeded' AND after_failure IS NULL) THEN deadline_at
            ELSE deadline_at
                + CASE WHEN COALESCE(NEW.finished_at, NEW.created_at) > not_before
                    THEN COALESCE(NEW.finished_at, NEW.created_at) ELSE not_before END
                - CASE WHEN created_at > not_before THEN created_at ELSE not_before END END
    WHERE state = 'waiting' AND id IN (
        SELECT child FROM dependencies WHERE parent = NEW.id AND parent_state IS NULL);
    UPDATE dependencies SET parent_state = NEW.state
    WHERE parent = NEW.id AND parent_state IS NULL;
{sqlite_only} END;
{postgres_only}     RETURN NULL;
{postgres_only} END $$;
-- Postgres fires it on those rows too unless told: only a change a statement of the store made
-- itself settles (pg_trigger_depth() 0), as SQLite's recursive_triggers off has it, else each
-- doomed row's firing would walk its empty subtree again (14 s for a chain of 1,500).
{postgres_only} DROP TRIGGER IF EXISTS invocations_settle_dependents ON invocations;
{postgres_only} CREATE TRIGGER invocations_settle_dependents AFTER UPDATE OF state ON invocations
{postgres_only}     FOR EACH ROW
{postgres_only}     WHEN (NEW.dependents IS NOT NULL AND pg_trigger_depth() = 0
{postgres_only}         AND NEW.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
{postgres_only}         AND OLD.state NOT IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout'))
{postgres_only}     EXECUTE FUNCTION lakeshore_settle_dependents();

-- migration: 37
-- Job runtimes (issue 46): what a job brings to its worker, and the bundles it names. `runtime`
-- is the invocation's runtime object as JSON (its bundle's digest, requirements, variables and
-- what shipped); `runtime_bundle` repeats the digest so retention finds the bundles still in
-- use with an index, not by reading JSON. A bundle is a manifest (runtime_manifests: its entries
-- as JSON, never a pickle) over content-addressed blobs (runtime_blobs), all per namespace: one
-- namespace's upload can never stand in for another's. runtime_manifest_blobs lists the blobs
-- each manifest names, so a blob is kept while any kept manifest names it.
ALTER TABLE invocations ADD COLUMN runtime TEXT;
ALTER TABLE invocations ADD COLUMN runtime_bundle TEXT;
CREATE INDEX IF NOT EXISTS invocations_runtime_bundle
    ON invocations (namespace, runtime_bundle) WHERE runtime_bundle IS NOT NULL;
CREATE TABLE IF NOT EXISTS runtime_blobs (
    namespace  TEXT NOT NULL,
    sha256     TEXT NOT NULL,
    size       BIGINT NOT NULL,
    data       {blob} NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (namespace, sha256)
);
CREATE TABLE IF NOT EXISTS runtime_manifests (
    namespace  TEXT NOT NULL,
    digest     TEXT NOT NULL,
    entries    TEXT NOT NULL,
    files      INTEGER NOT NULL,
    bytes      BIGINT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (namespace, digest)
);
CREATE TABLE IF NOT EXISTS runtime_manifest_blobs (
    namespace TEXT NOT NULL,
    digest    TEXT NOT NULL,
    sha256    TEXT NOT NULL,
    PRIMARY KEY (namespace, digest, sha256)
);
CREATE INDEX IF NOT EXISTS runtime_manifest_blobs_by_blob
    ON runtime_manifest_blobs (namespace, sha256);
-- migration: 38
-- Gangs (issue 47): a job of `nodes` > 1 runs as that many parts, one per worker, all at once.
-- Its parts are held (resources reserved, nothing started) until all are, then the attempt
-- starts (store/gangs.py). `nodes` is 1 on every other row, so ordinary claims pass gangs by
-- comparing a column of the row they read anyway (the `claimable` fragment), and whether a
-- claim's queues hold a queued gang at all is one probe of `invocations_gangs`, an index empty
-- but for queued gangs.
ALTER TABLE invocations ADD COLUMN nodes INTEGER NOT NULL DEFAULT 1;
CREATE INDEX IF NOT EXISTS invocations_gangs
    ON invocations (namespace, queue, priority DESC, id) WHERE state = 'queued' AND nodes > 1;
-- One row per gang attempt, from its first held part: `holding` until all `nodes` parts are
-- held (or `wait_until` passes: ended, outcome `released`), `started` while it runs, `ended`
-- after. `attempt` is the invocation's attempt it runs as. `failed_*`: the part whose settle
-- ended a started attempt first, and why. At most one live (holding or started) per job.
CREATE TABLE IF NOT EXISTS gangs (
    gang          TEXT PRIMARY KEY,
    id            TEXT NOT NULL,
    namespace     TEXT NOT NULL,
    queue         TEXT NOT NULL,
    attempt       INTEGER NOT NULL,
    nodes         INTEGER NOT NULL,
    state         TEXT NOT NULL,
    held          INTEGER NOT NULL DEFAULT 0,
    wait_until    {real} NOT NULL,
    created_at    {real} NOT NULL,
    started_at    {real},
    ended_at      {real},
    outcome       TEXT,
    failed_rank   INTEGER,
    failed_worker TEXT,
    failed_why    TEXT,
    -- One more at every change a part may wait for (`gang(..., since=)`): a part held or let
    -- go, an address posted, the start, a part's ack, the end.
    version       INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX IF NOT EXISTS gangs_live ON gangs (id) WHERE state IN ('holding', 'started');
CREATE INDEX IF NOT EXISTS gangs_holding ON gangs (namespace, queue) WHERE state = 'holding';
CREATE INDEX IF NOT EXISTS gangs_wait ON gangs (wait_until) WHERE state = 'holding';
CREATE INDEX IF NOT EXISTS gangs_of ON gangs (id);
-- One row per part: its own lease (rank 0's is also the invocation's once started, so every
-- settle of rank 0 is today's), the worker and the address it claimed from, the port it
-- posted (rank 0's: MASTER_PORT). state: held | started | acked | failed | stopped | released |
-- lost.
CREATE TABLE IF NOT EXISTS gang_parts (
    lease            TEXT PRIMARY KEY,
    gang             TEXT NOT NULL,
    id               TEXT NOT NULL,
    rank             INTEGER NOT NULL,
    worker           TEXT NOT NULL,
    addr             TEXT,
    port             INTEGER,
    placement        TEXT,
    lease_expires_at {real} NOT NULL,
    state            TEXT NOT NULL,
    held_at          {real} NOT NULL,
    result           {blob}
);
CREATE UNIQUE INDEX IF NOT EXISTS gang_parts_rank ON gang_parts (gang, rank)
    WHERE state IN ('held', 'started', 'acked');
CREATE UNIQUE INDEX IF NOT EXISTS gang_parts_worker ON gang_parts (gang, worker)
    WHERE state IN ('held', 'started', 'acked');
CREATE INDEX IF NOT EXISTS gang_parts_of ON gang_parts (gang, rank);
CREATE INDEX IF NOT EXISTS gang_parts_held_by ON gang_parts (worker) WHERE state = 'held';
CREATE INDEX IF NOT EXISTS gang_parts_live ON gang_parts (lease_expires_at)
    WHERE state IN ('held', 'started');
-- migration: 39
-- A gang's parts keep their own output (issue 47): a frame says which rank posted it. Rank 0's
-- are the job's stream, as every frame was before; a reader asks for another rank by name.
-- One journal per invocation still: seq is shared, so retention and retry clear every rank's.
ALTER TABLE frames ADD COLUMN rank INTEGER NOT NULL DEFAULT 0;
-- A preemption notice one part's box got, passed to every other part of its gang (its rank,
-- when, and the end of its grace), so that rank 0 checkpoints before its peer goes.
ALTER TABLE gangs ADD COLUMN noticed_rank INTEGER;
ALTER TABLE gangs ADD COLUMN noticed_at {real};
ALTER TABLE gangs ADD COLUMN notice_until {real};
-- migration: 40
-- A job's hang timeout (issue 47): seconds without progress from every part that make a hang,
-- handed to its daemons with each claim; NULL (every row before, and most after): none.
ALTER TABLE invocations ADD COLUMN hang_timeout_s {real};
-- When any part of a started gang last moved (a frame, a checkpoint, dls.run.progress()), as
-- its daemons report it every few seconds: a hang is no part moving for hang_timeout_s.
ALTER TABLE gangs ADD COLUMN progress_at {real};
-- The part whose daemon found the gang hung first, and when: every other part dumps its stacks
-- into its output before the attempt ends.
ALTER TABLE gangs ADD COLUMN hung_rank INTEGER;
ALTER TABLE gangs ADD COLUMN hung_at {real};
