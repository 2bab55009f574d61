-- Every statement the plane runs, by name. Parameters are :named; a list parameter expands to
-- one placeholder per element; {skip_locked} is the dialect's row-lock clause (empty on SQLite,
-- whose writers are already serialised by BEGIN IMMEDIATE).

-- name: ensure_namespace
INSERT INTO namespaces (name, org, created_at) VALUES (:ns, :org, :now)
ON CONFLICT (name) DO NOTHING;

-- name: get_namespace
SELECT name, org, created_at FROM namespaces WHERE name = :ns;

-- name: org_namespaces
SELECT name FROM namespaces WHERE name = :ns OR (org IS NOT NULL AND org = :org) ORDER BY name;

-- name: ensure_queue
INSERT INTO queues (namespace, name, kind, state, description, created_at, updated_at)
VALUES (:ns, :name, :kind, 'active', :description, :now, :now)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING name;

-- name: get_queue
SELECT * FROM queues WHERE namespace = :ns AND name = :name;

-- name: list_queues
SELECT * FROM queues WHERE namespace IN (:namespaces) ORDER BY namespace, name;

-- name: update_queue
UPDATE queues SET kind = :kind, state = :state, description = :description,
    elasticity = :elasticity, admission = :admission, updated_at = :now
WHERE namespace = :ns AND name = :name;

-- name: delete_queue
DELETE FROM queues WHERE namespace = :ns AND name = :name;

-- name: insert_event
INSERT INTO queue_events (namespace, queue, at, kind, detail)
VALUES (:ns, :queue, :now, :kind, :detail);

-- name: list_events
SELECT id, at, kind, detail FROM queue_events
WHERE namespace = :ns AND queue = :queue ORDER BY id DESC LIMIT :limit;

-- name: insert_invocation
INSERT INTO invocations (id, namespace, queue, state, priority, key, payload, max_attempts,
    timeout_s, created_at, deadline_at)
VALUES (:id, :ns, :queue, 'queued', :priority, :key, :payload, :max_attempts, :timeout_s, :now,
    :deadline_at)
ON CONFLICT (namespace, queue, key) WHERE key IS NOT NULL DO NOTHING
RETURNING id;

-- name: id_by_key
SELECT id FROM invocations WHERE namespace = :ns AND queue = :queue AND key = :key;

-- name: get_invocation
SELECT id, namespace, queue, state, priority, key, attempt, max_attempts, timeout_s,
    kill_requested, worker, error, result, created_at, started_at, finished_at
FROM invocations WHERE id = :id AND namespace = :ns;

-- name: count_state
SELECT count(*) AS n FROM invocations WHERE namespace = :ns AND queue = :queue AND state = :state;

-- name: count_by_state
SELECT queue, state, count(*) AS n FROM invocations
WHERE namespace = :ns AND state IN ('queued', 'running') GROUP BY queue, state;

-- name: priority_levels
SELECT priority, count(*) AS n FROM invocations
WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND not_before <= :now
  AND (deadline_at IS NULL OR deadline_at >= :now)
  AND queue NOT IN (SELECT name FROM queues WHERE namespace = :ns AND state = 'archived')
GROUP BY priority;

-- name: claim_fifo
UPDATE invocations
SET state = 'running', attempt = attempt + 1, lease = :lease, lease_expires_at = :expires,
    worker = :worker, started_at = :now
WHERE id = (
    SELECT id FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND not_before <= :now
      AND (deadline_at IS NULL OR deadline_at >= :now)
      AND queue NOT IN (SELECT name FROM queues WHERE namespace = :ns AND state = 'archived')
    ORDER BY priority DESC, id ASC LIMIT 1 {skip_locked})
RETURNING id, namespace, queue, payload, attempt, lease, lease_expires_at, timeout_s, priority;

-- name: claim_filo
UPDATE invocations
SET state = 'running', attempt = attempt + 1, lease = :lease, lease_expires_at = :expires,
    worker = :worker, started_at = :now
WHERE id = (
    SELECT id FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND not_before <= :now
      AND (deadline_at IS NULL OR deadline_at >= :now)
      AND queue NOT IN (SELECT name FROM queues WHERE namespace = :ns AND state = 'archived')
    ORDER BY priority DESC, id DESC LIMIT 1 {skip_locked})
RETURNING id, namespace, queue, payload, attempt, lease, lease_expires_at, timeout_s, priority;

-- name: claim_level
UPDATE invocations
SET state = 'running', attempt = attempt + 1, lease = :lease, lease_expires_at = :expires,
    worker = :worker, started_at = :now
WHERE id = (
    SELECT id FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND not_before <= :now
      AND priority = :priority
      AND queue NOT IN (SELECT name FROM queues WHERE namespace = :ns AND state = 'archived')
    ORDER BY id ASC LIMIT 1 {skip_locked})
RETURNING id, namespace, queue, payload, attempt, lease, lease_expires_at, timeout_s, priority;

-- name: requeue_expired
-- Every claim sweeps; {skip_locked} lets concurrent sweeps (Postgres) split the expired rows
-- instead of queueing behind, or deadlocking with, each other.
UPDATE invocations SET state = 'queued', lease = NULL, worker = NULL, not_before = 0
WHERE id IN (
    SELECT id FROM invocations
    WHERE state = 'running' AND lease_expires_at < :now AND attempt < max_attempts
      AND kill_requested = 0 {skip_locked})
RETURNING id;

-- name: end_expired
UPDATE invocations
SET state = CASE WHEN kill_requested = 1 THEN 'killed' ELSE 'failed' END,
    error = 'lease expired on attempt ' || attempt || ' of ' || max_attempts
        || ' (the worker stopped heartbeating)',
    finished_at = :now
WHERE id IN (
    SELECT id FROM invocations WHERE state = 'running' AND lease_expires_at < :now {skip_locked})
RETURNING id, error;

-- name: expire_deadlines
UPDATE invocations SET state = 'timeout', finished_at = :now,
    error = 'not started within the queue''s deadline_cutoff_s'
WHERE state = 'queued' AND deadline_at IS NOT NULL AND deadline_at < :now
RETURNING id;

-- name: settle_success
UPDATE invocations SET state = 'succeeded', result = :result, finished_at = :now
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
RETURNING id;

-- name: settle_terminal
UPDATE invocations SET state = :state, error = :error, finished_at = :now
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
RETURNING id;

-- name: settle_retry
UPDATE invocations SET state = 'queued', error = :error, not_before = :not_before,
    worker = NULL
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
  AND attempt < max_attempts AND kill_requested = 0
RETURNING id;

-- name: release
UPDATE invocations SET state = 'queued', attempt = attempt - 1, lease = NULL, worker = NULL,
    not_before = 0
WHERE id = :id AND lease = :lease AND state = 'running'
RETURNING id;

-- name: lease_of
-- Read where a write follows (post, nack, a refused settle): {for_update} holds the row on
-- Postgres so a sweep cannot re-dispatch the job between this check and the write.
SELECT state, lease, lease_expires_at, attempt FROM invocations WHERE id = :id {for_update};

-- name: renew_leases
UPDATE invocations SET lease_expires_at = :expires
WHERE lease IN (:leases) AND state = 'running' AND lease_expires_at >= :now
RETURNING id, kill_requested;

-- name: cancel_queued
UPDATE invocations SET state = 'cancelled', finished_at = :now,
    error = 'cancelled before it started'
WHERE id = :id AND namespace = :ns AND state = 'queued'
RETURNING id;

-- name: request_kill
UPDATE invocations SET kill_requested = 1
WHERE id = :id AND namespace = :ns AND state = 'running'
RETURNING id;

-- name: append_frame
INSERT INTO frames (channel, seq, kind, value, created_at)
SELECT :channel, COALESCE(MAX(seq), -1) + 1, :kind, :value, :now FROM frames
WHERE channel = :channel
RETURNING seq;

-- name: last_frame
SELECT seq, kind FROM frames WHERE channel = :channel ORDER BY seq DESC LIMIT 1;

-- name: frames_since
SELECT seq, kind, value FROM frames WHERE channel = :channel AND seq > :since
ORDER BY seq LIMIT :limit;

-- name: upsert_worker
INSERT INTO workers (id, namespace, name, queues, host, pid, info, load, state, created_at,
    heartbeat_at)
VALUES (:id, :ns, :name, :queues, :host, :pid, :info, '{}', 'alive', :now, :now);

-- name: retire_workers_named
UPDATE workers SET state = 'gone' WHERE namespace = :ns AND name = :name AND state != 'gone';

-- name: heartbeat_worker
-- An operator's drain (or a retirement) outlives the daemon's own report of being alive.
UPDATE workers SET heartbeat_at = :now, load = :load,
    state = CASE WHEN state IN ('gone', 'draining') THEN state ELSE :state END
WHERE id = :id
RETURNING queues, state;

-- name: get_worker
SELECT * FROM workers WHERE namespace = :ns AND (id = :ref OR (name = :ref AND state != 'gone'))
ORDER BY heartbeat_at DESC LIMIT 1;

-- name: list_workers
SELECT * FROM workers WHERE namespace = :ns AND state != 'gone' ORDER BY name;

-- name: set_worker_queues
UPDATE workers SET queues = :queues WHERE id = :id;

-- name: set_worker_state
UPDATE workers SET state = :state WHERE id = :id;

-- name: cancel_queue_backlog
UPDATE invocations SET state = 'cancelled', finished_at = :now,
    error = 'the queue was deleted before it started'
WHERE namespace = :ns AND queue = :queue AND state = 'queued'
RETURNING id;

-- name: queue_running_workers
SELECT worker, count(*) AS n FROM invocations
WHERE namespace = :ns AND queue = :queue AND state = 'running' GROUP BY worker;

-- name: get_worker_by_id
SELECT * FROM workers WHERE id = :id;

-- name: auth_insert_token
-- Tokens and namespaces for the control plane's auth (sdk/plane/auth.py). A token is stored as
-- its sha256 hex digest only; looking it up by that digest is the constant-time comparison.
INSERT INTO tokens (hash, namespace, label, created_at) VALUES (:hash, :ns, :label, :now);

-- name: auth_get_token
SELECT t.hash, t.namespace, t.label, n.org FROM tokens t
LEFT JOIN namespaces n ON n.name = t.namespace WHERE t.hash = :hash;

-- name: auth_count_tokens
SELECT count(*) AS n FROM tokens;

-- name: auth_list_tokens
SELECT hash, namespace, label, created_at FROM tokens ORDER BY created_at;

-- name: auth_set_namespace_org
UPDATE namespaces SET org = :org WHERE name = :ns;

-- name: auth_list_namespaces
SELECT name, org, created_at FROM namespaces ORDER BY name;

-- name: key_exists
SELECT 1 AS found FROM invocations WHERE namespace = :ns AND queue = :queue AND key = :key;

-- name: get_bucket
SELECT tokens, updated_at FROM rate_buckets WHERE namespace = :ns AND queue = :queue
{for_update};

-- name: put_bucket
INSERT INTO rate_buckets (namespace, queue, tokens, updated_at)
VALUES (:ns, :queue, :tokens, :now)
ON CONFLICT (namespace, queue) DO UPDATE SET tokens = :tokens, updated_at = :now;
