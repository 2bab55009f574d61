-- Every statement the plane runs, by name. Parameters are :named; a list parameter expands to
-- one placeholder per element; {skip_locked} is the dialect's row-lock clause (empty on SQLite,
-- whose writers are already serialised by BEGIN IMMEDIATE); {claimable} is the fragment of that
-- name below (sdk/plane/queries.py expands fragments before the dialect's words).

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

-- name: id_by_key
SELECT id FROM invocations WHERE namespace = :ns AND queue = :queue AND key = :key;

-- fragment: reasons
-- A queued invocation's pending reason and its words (migration 35): NULL once it left the queue.
CASE WHEN state = 'queued' THEN (SELECT reason FROM pending_reasons r WHERE r.id = invocations.id)
    END AS pending_reason,
CASE WHEN state = 'queued' THEN (SELECT words FROM pending_reasons r WHERE r.id = invocations.id)
    END AS unschedulable_reason

-- name: get_invocation
SELECT id, namespace, queue, state, priority, key, attempt, max_attempts, timeout_s,
    kill_requested, worker, error, result, created_at, started_at, finished_at,
    resources, placement, {reasons},
    preemptions, max_preemptions, ended_by, checkpoint, open_parents, runtime, nodes,
    hang_timeout_s
FROM invocations WHERE id = :id AND namespace = :ns;

-- name: count_state
-- From the depth counters (migration 18): the sum of a few stripes, however deep the queue.
SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS n FROM queue_counts
WHERE namespace = :ns AND queue = :queue AND state = :state;

-- name: count_by_state
SELECT queue, state, count(*) AS n FROM invocations
WHERE namespace = :ns AND state IN ('queued', 'running') GROUP BY queue, state;

-- fragment: fits
-- A claim from a worker that sends what it has free (issue 34, sdk/resources.py) takes only a
-- job that fits in it: its GPUs (a fraction below 1 on the GPU with the most room, from 1 up
-- that many GPUs nobody uses), of a type and memory it has, its CPUs and memory. Columns of the
-- row the walk reads anyway (migration 24); NULL gpus is a job that states none: the worker's
-- --gpus-per-job. gpu_type is a pattern of the acceptable names (`gpu_type_pattern`),
-- searched in the names of the worker's GPUs with room.
AND (COALESCE(gpus, :default_gpus) = 0 OR (
    (CASE WHEN COALESCE(gpus, :default_gpus) < 1 THEN :gpu_share ELSE :gpus_whole END)
        >= COALESCE(gpus, :default_gpus)
    AND (gpu_memory_gb IS NULL OR gpu_memory_gb <= :gpu_memory_gb)
    AND (gpu_type IS NULL OR :gpu_names {regexp} gpu_type)))
AND (cpus IS NULL OR cpus <= :cpus) AND (memory_gb IS NULL OR memory_gb <= :memory_gb)

-- fragment: claim_running
-- What every claim statement writes on the row it takes: one more attempt, under its lease.
state = 'running', attempt = attempt + 1, lease = :lease, lease_expires_at = :expires,
    worker = :worker, started_at = :now

-- fragment: claimed_columns
-- What every claim statement returns of the row it took (`claim_of`, and `inputs` for
-- `dependencies.with_inputs`): written once, so no claim path returns less than another.
id, namespace, queue, payload, attempt, lease, lease_expires_at, timeout_s, priority,
    signature, resources, preemptions, checkpoint, inputs, runtime, hang_timeout_s

-- fragment: claim_queued_id
-- Claim the one job :id that a claim picked first and takes second (`resumed_head`'s, or the
-- head a worker reserved for): still queued, or nothing.
UPDATE invocations
SET {claim_running}
WHERE id = :id AND state = 'queued'
RETURNING {claimed_columns}

-- fragment: takeable
-- What a claim may take, a gang's part (store/gangs.py) as much as a job: a queued job of the
-- claimer's namespace whose retry backoff is over (not_before), whose deadline
-- (deadline_cutoff_s) has not passed, that is not held for another host (locality_until,
-- migration 16: a column of the row the walk reads anyway, NULL on every unhinted row) and
-- whose queue is not archived.
namespace = :ns AND state = 'queued' AND not_before <= :now
    AND (deadline_at IS NULL OR deadline_at >= :now)
    AND (locality_until IS NULL OR locality_until <= :now OR locality_host = :host)
    AND queue NOT IN (SELECT name FROM queues WHERE namespace = :ns AND state = 'archived')

-- fragment: claimable
-- What a claim takes whole, written once for every claim statement (and the boltzmann levels a
-- claim picks from), each of which adds only which queues: `takeable`, and one box's job (a
-- gang of nodes > 1 is handed out in parts by store/gangs.py, never by these statements).
{takeable}
    AND nodes = 1

-- name: priority_levels
SELECT priority, count(*) AS n FROM invocations
WHERE queue IN (:queues) AND {claimable}
  {fits}
GROUP BY priority;

-- name: claim_fifo
UPDATE invocations
SET {claim_running}
WHERE id = (
    SELECT id FROM invocations
    WHERE queue IN (:queues) AND {claimable}
      {fits}
    ORDER BY priority DESC, id ASC LIMIT 1 {skip_locked})
RETURNING {claimed_columns};

-- name: claim_fifo_batch
-- Up to :limit jobs of a fifo queue in one statement (claim_many's common case). The batch
-- shares one lease: every settle is still fenced by id and lease, and one worker holds them all.
UPDATE invocations
SET {claim_running}
WHERE id IN (
    SELECT id FROM invocations
    WHERE queue IN (:queues) AND {claimable}
      {fits}
    ORDER BY priority DESC, id ASC LIMIT :limit {skip_locked})
RETURNING {claimed_columns};

-- name: claim_filo
UPDATE invocations
SET {claim_running}
WHERE id = (
    SELECT id FROM invocations
    WHERE queue IN (:queues) AND {claimable}
      {fits}
    ORDER BY priority DESC, id DESC LIMIT 1 {skip_locked})
RETURNING {claimed_columns};

-- name: resumed_head
-- Issue 35, a filo claim: the claimable job a preemption requeued that comes first among the
-- highest priority (index invocations_resumed, migration 34: the `ended_by` term is its
-- condition word for word); taken only when nothing claimable is higher (claimable_above).
SELECT id, priority FROM invocations
WHERE queue IN (:queues) AND {claimable}
  AND ended_by IN ('notice', 'daemon_lost', 'exit75', 'gpu_failed') AND priority >= :priority
  {fits}
ORDER BY priority DESC, id ASC LIMIT 1 {skip_locked};

-- name: claimable_above
-- Whether anything claimable outranks a resumed job (index invocations_claim, by priority).
SELECT id FROM invocations
WHERE queue IN (:queues) AND {claimable} AND priority > :priority
  {fits}
ORDER BY priority DESC LIMIT 1;

-- name: claim_by_id
-- Claim the one queued job `resumed_head` found (its row is this transaction's on Postgres).
{claim_queued_id};

-- name: claim_level
UPDATE invocations
SET {claim_running}
WHERE id = (
    SELECT id FROM invocations
    WHERE queue IN (:queues) AND priority = :priority AND {claimable}
      {fits}
    ORDER BY id ASC LIMIT 1 {skip_locked})
RETURNING {claimed_columns};

-- name: requeue_expired
-- Every claim sweeps; {skip_locked} lets concurrent sweeps (Postgres) split the expired rows
-- instead of queueing behind, or deadlocking with, each other. A lease that ran out with no
-- settle is the worker's loss, not the job's failure (issue 35): a preemption, requeued at once
-- while the job has preemptions left, its attempts untouched.
UPDATE invocations SET state = 'queued', lease = NULL, worker = NULL, not_before = 0,
    preemptions = preemptions + 1, ended_by = 'daemon_lost'
WHERE id IN (
    SELECT id FROM invocations
    WHERE {lease_ran_out} AND preemptions < max_preemptions
      AND kill_requested = 0 {skip_locked})
RETURNING id, nodes;

-- name: end_expired
-- Only what requeue_expired may not move: on Postgres it skips a row another transaction holds
-- (a refused ack reading its lease), and that row, unlocked by the time this runs, still has
-- its retries.
UPDATE invocations
SET state = CASE WHEN kill_requested = 1 THEN 'killed' ELSE 'failed' END,
    error = CASE WHEN kill_requested = 1
        THEN 'lease expired on attempt ' || attempt || ' after a kill was requested'
            || ' (the worker stopped heartbeating)'
        ELSE 'lease expired on attempt ' || attempt || ' (the worker stopped heartbeating): '
            || 'preempted ' || (preemptions + 1) || ' times, past its max_preemptions of '
            || max_preemptions || ', so it can never finish' END,
    preemptions = CASE WHEN kill_requested = 1 THEN preemptions ELSE preemptions + 1 END,
    ended_by = CASE WHEN kill_requested = 1 THEN 'cancel' ELSE 'daemon_lost' END,
    finished_at = :now
WHERE id IN (
    SELECT id FROM invocations
    WHERE {lease_ran_out}
      AND (preemptions >= max_preemptions OR kill_requested = 1) {skip_locked})
RETURNING id, error, nodes;

-- name: expire_deadlines
UPDATE invocations SET state = 'timeout', finished_at = :now,
    error = 'not started within the queue''s deadline_cutoff_s'
WHERE {deadline_passed}
RETURNING id;

-- name: settle_success
-- dependents: whether jobs wait on it (migration 26): its commit may have released them. A
-- gang's row (nodes > 1) succeeds only once every part has acked (store/gangs.py, ack_part).
UPDATE invocations SET state = 'succeeded', result = :result, finished_at = :now
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
  AND nodes = 1
RETURNING id, dependents, nodes;

-- name: settle_success_in
-- settle_success for a caller bound to a namespace: an id of another one matches nothing (and
-- the settle that matched nothing then reads as unknown), in the one statement of an ack. It
-- returns the row as get_invocation reads it but for the result, which the ack holds: the
-- server hands it to a submit-and-wait without reading it back.
UPDATE invocations SET state = 'succeeded', result = :result, finished_at = :now
WHERE id = :id AND namespace = :ns AND lease = :lease AND state = 'running'
  AND lease_expires_at >= :now AND nodes = 1
RETURNING id, namespace, queue, state, priority, key, attempt, max_attempts, timeout_s,
    kill_requested, worker, error, created_at, started_at, finished_at,
    preemptions, max_preemptions, ended_by, checkpoint, dependents, nodes, hang_timeout_s;

-- name: settle_gang_success
-- A gang's row once its last part acked (store/gangs.py): rank 0's result, under the row's
-- lease (rank 0's part's), returning what settle_success_in does.
UPDATE invocations SET state = 'succeeded', result = :result, finished_at = :now
WHERE id = :id AND lease = :lease AND state = 'running' AND nodes > 1
RETURNING id, namespace, queue, state, priority, key, attempt, max_attempts, timeout_s,
    kill_requested, worker, error, created_at, started_at, finished_at,
    preemptions, max_preemptions, ended_by, checkpoint, dependents, nodes, hang_timeout_s;

-- name: settle_terminal
UPDATE invocations SET state = :state, error = :error, finished_at = :now, ended_by = :cause
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
RETURNING id, nodes;

-- name: settle_retry
-- Attempts a preemption ended are not charged: `attempt - preemptions` counts the failures.
UPDATE invocations SET state = 'queued', error = :error, not_before = :not_before,
    worker = NULL, ended_by = 'error'
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
  AND attempt - preemptions < max_attempts AND kill_requested = 0
RETURNING id;

-- name: release
UPDATE invocations SET state = 'queued', attempt = attempt - 1, lease = NULL, worker = NULL,
    not_before = 0
WHERE id = :id AND lease = :lease AND state = 'running'
RETURNING id, nodes;

-- name: lease_of
-- Read where a write follows (post, nack, a refused settle): {for_update} holds the row on
-- Postgres so a sweep cannot re-dispatch the job between this check and the write.
SELECT state, lease, lease_expires_at, attempt, nodes FROM invocations WHERE id = :id {for_update};

-- name: queue_for_submit
-- A submit's queue row, and how many of the ids its producer minted exist already (anywhere):
-- none, the usual answer, spares it reading where they live (invocation_homes).
SELECT q.*, (SELECT count(*) FROM invocations WHERE id IN (:ids)) AS ids_taken
FROM queues q WHERE q.namespace = :ns AND q.name = :name;

-- name: invocation_homes
-- Where ids a producer minted already live: a submit sent again finds the jobs it made.
SELECT id, namespace, queue FROM invocations WHERE id IN (:ids);

-- name: settled_result
-- The result a succeeded attempt stored: a repeated ack must carry the same one.
SELECT result FROM invocations WHERE id = :id;

-- name: renew_leases
UPDATE invocations SET lease_expires_at = :expires
WHERE lease IN (:leases) AND state = 'running' AND lease_expires_at >= :now
RETURNING id, kill_requested, nodes;

-- name: cancel_queued
UPDATE invocations SET state = 'cancelled', finished_at = :now,
    error = 'cancelled before it started'
WHERE id = :id AND namespace = :ns AND state IN ('queued', 'scheduled', 'waiting')
RETURNING id;

-- name: request_kill
UPDATE invocations SET kill_requested = 1
WHERE id = :id AND namespace = :ns AND state = 'running'
RETURNING id, worker;

-- name: append_frame
INSERT INTO frames (channel, seq, kind, value, created_at, post_id, rank)
SELECT :channel, COALESCE(MAX(seq), -1) + 1, :kind, :value, :now, :post_id, :rank FROM frames
WHERE channel = :channel
RETURNING seq;

-- name: frame_by_post_id
-- The frame a post with this id made already (the same post sent again).
SELECT seq FROM frames WHERE channel = :channel AND post_id = :post_id;

-- name: last_frame
SELECT seq, kind FROM frames WHERE channel = :channel ORDER BY seq DESC LIMIT 1;

-- name: frames_since
-- One rank's frames (a gang's part, issue 47; 0 for every other job's and for topics).
SELECT seq, kind, value FROM frames WHERE channel = :channel AND seq > :since AND rank = :rank
ORDER BY seq LIMIT :limit;

-- name: upsert_worker
INSERT INTO workers (id, namespace, name, queues, host, pid, info, load, state, created_at,
    heartbeat_at)
VALUES (:id, :ns, :name, :queues, :host, :pid, :info, '{}', 'alive', :now, :now);

-- name: retire_workers_named
UPDATE workers SET state = 'gone' WHERE namespace = :ns AND name = :name AND state != 'gone';

-- name: heartbeat_worker
-- An operator's drain (or a retirement, or a preemption notice) outlives the daemon's own
-- report of being alive.
UPDATE workers SET heartbeat_at = :now, load = :load,
    state = CASE WHEN state IN ('gone', 'draining', 'preempting') THEN state ELSE :state END
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
WHERE namespace = :ns AND queue = :queue AND state IN ('queued', 'scheduled', 'waiting')
RETURNING id;

-- name: queue_running_workers
SELECT worker, count(*) AS n FROM invocations
WHERE namespace = :ns AND queue = :queue AND state = 'running' GROUP BY worker;

-- name: get_worker_by_id
SELECT * FROM workers WHERE id = :id;

-- name: auth_insert_token
-- Tokens and namespaces for the control plane's auth (sdk/plane/auth.py). A token is stored as
-- its sha256 hex digest only; looking it up by that digest is the constant-time comparison.
INSERT INTO tokens (hash, namespace, label, created_at, admin, scopes, expires_at)
VALUES (:hash, :ns, :label, :now, :admin, :scopes, :expires_at);

-- name: auth_get_token
SELECT t.hash, t.namespace, t.label, t.admin, t.scopes, t.expires_at, n.org FROM tokens t
LEFT JOIN namespaces n ON n.name = t.namespace WHERE t.hash = :hash;

-- name: auth_count_tokens
SELECT count(*) AS n FROM tokens;

-- name: auth_list_tokens
SELECT hash, namespace, label, admin, scopes, created_at, expires_at FROM tokens
ORDER BY created_at;

-- name: auth_set_namespace_org
UPDATE namespaces SET org = :org WHERE name = :ns;

-- name: auth_list_namespaces
SELECT name, org, created_at FROM namespaces ORDER BY name;

-- name: auth_job_of
-- A job token's invocation: it opens its namespace while the attempt it was minted for runs.
SELECT namespace, state, lease FROM invocations WHERE id = :id;

-- name: key_exists
SELECT 1 AS found FROM invocations WHERE namespace = :ns AND queue = :queue AND key = :key;

-- name: get_bucket
SELECT tokens, updated_at FROM rate_buckets WHERE namespace = :ns AND queue = :queue
{for_update};

-- name: put_bucket
INSERT INTO rate_buckets (namespace, queue, tokens, updated_at)
VALUES (:ns, :queue, :tokens, :now)
ON CONFLICT (namespace, queue) DO UPDATE SET tokens = :tokens, updated_at = :now;

-- fragment: listed
-- The rows of a listed invocation, written once for every list_invocations statement:
-- everything but the payload, and the result as NULL (a listing ships no bytes).
SELECT id, namespace, queue, state, priority, key, attempt, max_attempts, timeout_s,
    kill_requested, worker, error, NULL AS result, created_at, started_at, finished_at,
    resources, placement, {reasons},
    preemptions, max_preemptions, ended_by, checkpoint, nodes, hang_timeout_s
FROM invocations

-- fragment: newest_first
-- A page of a listing: newest first, walking the statement's index backwards from the start.
ORDER BY id DESC LIMIT :limit

-- name: list_invocations
-- `lakeshore jobs ls`, `GET .../invocations` and the dashboard's recent list: newest first,
-- without payload or result bytes (a listing should not ship megabytes; `invocation(id)` reads
-- the result). A page is a keyset: the `_before` twin of each statement starts below the last
-- id of the previous page, so page 50,000 costs what page 1 does, never an OFFSET. One
-- statement per filter combination, each on an index whose columns are its equalities then id
-- (migration 19): the engine walks that index backwards from the start and stops after a page
-- of rows, with no sort. One statement with optional filters ("the queue parameter is NULL or
-- queue equals it") let neither SQLite nor a generic Postgres plan seek on them: 2.3 s for 20
-- rows at 1M queued. tests/unit/test_listing_plans.py checks every plan on both engines.
{listed} WHERE namespace = :ns {newest_first};

-- name: list_invocations_before
{listed} WHERE namespace = :ns AND id < :before {newest_first};

-- name: list_invocations_queue
{listed} WHERE namespace = :ns AND queue = :queue {newest_first};

-- name: list_invocations_queue_before
{listed} WHERE namespace = :ns AND queue = :queue AND id < :before {newest_first};

-- name: list_invocations_state
{listed} WHERE namespace = :ns AND state = :state {newest_first};

-- name: list_invocations_state_before
{listed} WHERE namespace = :ns AND state = :state AND id < :before {newest_first};

-- name: list_invocations_queue_state
{listed} WHERE namespace = :ns AND queue = :queue AND state = :state {newest_first};

-- name: list_invocations_queue_state_before
{listed} WHERE namespace = :ns AND queue = :queue AND state = :state AND id < :before {newest_first};

-- name: list_invocations_map
-- The jobs of one map (migration 27), newest first, on index invocations_map.
{listed} WHERE namespace = :ns AND map_id = :map_id {newest_first};

-- name: list_invocations_map_before
{listed} WHERE namespace = :ns AND map_id = :map_id AND id < :before {newest_first};

-- name: maps_in_flight
-- The maps with jobs of `state` in a queue (`lakeshore status` shows their progress), looked for
-- among the oldest :scan rows of that state only: a deep queue of other work costs a page.
SELECT DISTINCT map_id FROM (
    SELECT map_id FROM invocations
    WHERE namespace = :ns AND queue = :queue AND state = :state
    ORDER BY id LIMIT :scan
) AS head
WHERE map_id IS NOT NULL;

-- name: map_progress
-- One map's jobs by state, on index invocations_map.
SELECT state, count(*) AS n FROM invocations
WHERE namespace = :ns AND map_id = :map_id
GROUP BY state;

-- name: retry_terminal
-- `jobs retry`: a failed / killed / timeout invocation back to queued as one more attempt. The
-- attempt budget grows by one when it is spent, so the claim and the lease sweep allow it.
UPDATE invocations
SET state = 'queued', lease = NULL, lease_expires_at = NULL, worker = NULL, kill_requested = 0,
    not_before = 0, started_at = NULL, finished_at = NULL, deadline_at = :deadline_at,
    max_attempts = CASE WHEN attempt >= max_attempts THEN attempt + 1 ELSE max_attempts END,
    max_preemptions = CASE WHEN preemptions >= max_preemptions THEN preemptions + 1
        ELSE max_preemptions END
WHERE id = :id AND namespace = :ns AND state IN ('failed', 'killed', 'timeout')
RETURNING id;

-- name: retry_clear_frames
-- The retried attempt starts a fresh journal: the old one ended with an ERROR frame, which
-- closes a journal to further posts.
DELETE FROM frames WHERE channel = :channel;

-- name: depth_by_state
-- The depth counters (migration 18); a state none of whose jobs are left is absent, as when
-- this counted rows.
SELECT queue, state, CAST(SUM(n) AS BIGINT) AS n FROM queue_counts WHERE namespace = :ns
GROUP BY queue, state HAVING SUM(n) <> 0;

-- name: finished_since
-- Completions in a time window, for throughput and latency sparklines (index invocations_finished).
SELECT queue, state, created_at, started_at, finished_at FROM invocations
WHERE namespace = :ns AND finished_at IS NOT NULL AND finished_at >= :since
ORDER BY finished_at DESC LIMIT :limit;

-- name: running_by_worker
SELECT worker, count(*) AS n FROM invocations
WHERE namespace = :ns AND state = 'running' GROUP BY worker;

-- name: running_placements
-- Where each running job was placed (its worker and GPU shares): the dashboard's GPUs in use.
SELECT worker, placement FROM invocations
WHERE namespace = :ns AND state = 'running' AND placement IS NOT NULL;

-- name: namespace_events
SELECT id, queue, at, kind, detail FROM queue_events
WHERE namespace = :ns ORDER BY id DESC LIMIT :limit;

-- name: metrics_depth
-- /metrics, read at scrape time over every namespace, from the depth counters (migration 18).
SELECT namespace, queue, state, CAST(SUM(n) AS BIGINT) AS n FROM queue_counts
GROUP BY namespace, queue, state HAVING SUM(n) <> 0;

-- name: metrics_workers
SELECT namespace, state, CASE WHEN heartbeat_at < :stale_before THEN 1 ELSE 0 END AS stale,
    count(*) AS n
FROM workers GROUP BY namespace, state, CASE WHEN heartbeat_at < :stale_before THEN 1 ELSE 0 END;

-- name: metrics_events
SELECT namespace, queue, kind, count(*) AS n FROM queue_events GROUP BY namespace, queue, kind;

-- name: ping
SELECT 1 AS ok;

-- name: steal_policies
-- Work stealing (sdk/plane/steal.py) and the controller (controller/observe.py) from here on.
SELECT name, elasticity FROM queues WHERE namespace = :ns AND name IN (:names);

-- name: steal_aged
UPDATE invocations
SET {claim_running}
WHERE id = (
    SELECT id FROM invocations
    WHERE queue = :queue AND created_at <= :aged AND {claimable}
      {fits}
    ORDER BY priority DESC, id ASC LIMIT 1 {skip_locked})
RETURNING {claimed_columns};

-- name: controller_queues
SELECT namespace, name, state, elasticity FROM queues ORDER BY namespace, name;

-- name: controller_counts
SELECT namespace, queue, state, CAST(SUM(n) AS BIGINT) AS n FROM queue_counts
WHERE state IN ('queued', 'running') GROUP BY namespace, queue, state HAVING SUM(n) <> 0;

-- name: count_drift
-- Where the depth counters disagree with a recount of the rows (a test and operator check; it
-- reads every invocation). One statement, so both sides come from one snapshot on Postgres too.
SELECT namespace, queue, state, CAST(SUM(kept) AS BIGINT) AS kept,
    CAST(SUM(found) AS BIGINT) AS found
FROM (
    SELECT namespace, queue, state, n AS kept, 0 AS found FROM queue_counts
    UNION ALL
    SELECT namespace, queue, state, 0 AS kept, count(*) AS found FROM invocations
    GROUP BY namespace, queue, state
) AS both_sides
GROUP BY namespace, queue, state HAVING SUM(kept) <> SUM(found)
ORDER BY namespace, queue, state;

-- name: controller_shapes
-- The requests of queued and running jobs per queue (issue 34): the controller packs them onto
-- its providers' launch shapes. Columns only (no `resources` read), so the queued half is the
-- index invocations_shapes alone; jobs stating no request are the counts' remainder. Gangs
-- (issue 47) are counted again in rows of their own, `nodes` > 1 (the queued ones from
-- invocations_gangs), with `stated` saying whether the first rows counted them already.
SELECT namespace, queue, 'queued' AS state, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb,
    1 AS nodes, 1 AS stated, count(*) AS n
FROM invocations WHERE state = 'queued' AND resources IS NOT NULL
GROUP BY namespace, queue, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb
UNION ALL
SELECT namespace, queue, 'running' AS state, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb,
    1 AS nodes, 1 AS stated, count(*) AS n
FROM invocations WHERE state = 'running' AND resources IS NOT NULL
GROUP BY namespace, queue, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb
UNION ALL
SELECT namespace, queue, state, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb, nodes,
    CASE WHEN resources IS NULL THEN 0 ELSE 1 END AS stated, count(*) AS n
FROM invocations WHERE state IN ('queued', 'running') AND nodes > 1
GROUP BY namespace, queue, state, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb, nodes,
    CASE WHEN resources IS NULL THEN 0 ELSE 1 END;

-- name: controller_running_by_worker
-- A gang's row names rank 0's worker; the daemons running its other parts are busy too.
SELECT namespace, worker, CAST(SUM(n) AS BIGINT) AS n FROM (
    SELECT namespace, worker, count(*) AS n FROM invocations
    WHERE state = 'running' GROUP BY namespace, worker
    UNION ALL
    SELECT g.namespace, p.worker, count(*) AS n FROM gang_parts AS p
    JOIN gangs AS g ON g.gang = p.gang
    WHERE p.state = 'started' AND p.rank > 0 AND g.state = 'started'
    GROUP BY g.namespace, p.worker
) AS busy GROUP BY namespace, worker;

-- name: controller_workers
SELECT id, namespace, name, queues, state, heartbeat_at, created_at FROM workers
WHERE state != 'gone';

-- name: provider_insert
INSERT INTO providers (namespace, name, kind, config, created_at, updated_at)
VALUES (:ns, :name, :kind, :config, :now, :now)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING name;

-- name: provider_get
SELECT * FROM providers WHERE namespace = :ns AND name = :name;

-- name: provider_list
SELECT * FROM providers WHERE namespace = :ns ORDER BY name;

-- name: provider_list_all
SELECT * FROM providers ORDER BY namespace, name;

-- name: provider_delete
DELETE FROM providers WHERE namespace = :ns AND name = :name RETURNING name;

-- name: retention_namespaces
-- Retention (issue 7) trims one namespace at a time, so each pass walks the
-- (namespace, finished_at) index of terminal rows instead of the whole history.
SELECT name FROM namespaces ORDER BY name;

-- name: retention_trim_frames
-- Frames of invocations of :ns that ended before :cutoff, a batch at a time. The frames index on
-- created_at (migration 11) bounds the scan to frames older than the cutoff; a frame is never
-- younger than its invocation's end, so none of a trimmable journal is missed.
DELETE FROM frames WHERE (channel, seq) IN (
    SELECT f.channel, f.seq FROM frames f JOIN invocations i ON i.id = f.channel
    WHERE f.created_at < :cutoff AND i.namespace = :ns AND i.finished_at < :cutoff
      AND i.state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
    LIMIT :limit)
RETURNING seq, CASE WHEN length(value) <= :ref_bytes THEN value END AS value;

-- name: retention_old_invocations
-- Terminal invocations of :ns that ended before :cutoff, oldest first. payload and result come
-- back only when short enough to be a spilled StorageRef (never megabytes per row), so the
-- store can find the spilled objects to delete without reading (or decoding) real payloads.
SELECT id,
    CASE WHEN length(payload) <= :ref_bytes THEN payload END AS payload,
    CASE WHEN length(result) <= :ref_bytes THEN result END AS result,
    objects, checkpoint
FROM invocations
WHERE namespace = :ns AND finished_at IS NOT NULL AND finished_at < :cutoff
  AND state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
ORDER BY finished_at LIMIT :limit;

-- name: retention_delete_frames_of
-- A frame's value comes back only when it could be a spilled Ref (see retention_old_invocations).
DELETE FROM frames WHERE channel IN (:ids)
RETURNING seq, CASE WHEN length(value) <= :ref_bytes THEN value END AS value;

-- name: retention_delete_invocations
DELETE FROM invocations
WHERE id IN (:ids) AND state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
RETURNING id;

-- name: insert_invocation_signed
-- :state is 'queued', or 'scheduled' until :not_before (a delayed submit, sdk/workflow.py), or
-- 'waiting' for :open_parents (dependencies.py: cancelled at once, with :error and
-- :finished_at, when a parent already failed).
-- Insert a queued invocation with its payload's signature (NULL when the plane has no key),
-- its locality hint and the objects it owns; a key already used inserts nothing, and the store
-- reads the existing id.
INSERT INTO invocations (id, namespace, queue, state, priority, key, payload, max_attempts,
    timeout_s, created_at, deadline_at, signature, locality_host, locality_until, objects,
    map_id, not_before, open_parents, after_failure, inputs, error, finished_at)
VALUES (:id, :ns, :queue, :state, :priority, :key, :payload, :max_attempts, :timeout_s, :now,
    :deadline_at, :signature, :locality_host, :locality_until, :objects, :map_id, :not_before,
    :open_parents, :after_failure, :inputs, :error, :finished_at)
ON CONFLICT (namespace, queue, key) WHERE key IS NOT NULL DO NOTHING
RETURNING id;

-- name: auth_delete_tokens
-- `lakeshore tokens revoke`: by the digest prefix `tokens ls` shows (unique, checked first).
DELETE FROM tokens WHERE hash IN (:hashes) RETURNING hash, namespace, label;

-- name: signature_of
SELECT signature FROM invocations WHERE id = :id;

-- name: leader_acquire
-- Take or keep leadership of :name until :expires_at: granted when nobody holds it, when its
-- holder's lease has run out, or when :holder already holds it (a renewal). No row: refused.
INSERT INTO leader_leases (name, holder, expires_at) VALUES (:name, :holder, :expires_at)
ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE leader_leases.holder = excluded.holder OR leader_leases.expires_at < :now
RETURNING holder;

-- name: leader_release
DELETE FROM leader_leases WHERE name = :name AND holder = :holder;

-- name: locality_next
-- When the next locality window of these queues ends (sdk/plane/locality.py): an idle claim
-- wakes then instead of at its safety poll. Index invocations_locality: hinted queued rows only.
SELECT MIN(locality_until) AS next_window, (
    SELECT MIN(not_before) FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'scheduled'
) AS next_due FROM invocations
WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND locality_until > :now;

-- name: queue_for_claim
-- A claim's first queue's row (its kind orders the claim), locality_next, and how many jobs its
-- queues hold queued (the exact counters of migration 18, stripes summed) in one statement: a
-- claim on queues that hold none runs no claim statement.
SELECT q.*, (
    SELECT MIN(locality_until) FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND locality_until > :now
) AS next_window, (
    SELECT MIN(not_before) FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'scheduled'
) AS next_due, (
    SELECT COALESCE(SUM(n), 0) FROM queue_counts
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued'
) AS queued, CASE WHEN EXISTS (
    SELECT 1 FROM invocations {gangs_index}
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND nodes > 1
) THEN 1 ELSE 0 END AS gangs
FROM queues q WHERE q.namespace = :ns AND q.name = :name;

-- name: rollup_since
-- The completion rollup (migration 21) of :ns from second :since on, stripes summed: what the
-- dashboard's throughput and latency figures are made of. Walks the primary key's
-- (namespace, at) prefix: rows of the window only, however deep the queues or long the history.
SELECT queue, at, kind, bin, CAST(SUM(n) AS BIGINT) AS n FROM queue_rollup
WHERE namespace = :ns AND at >= :since
GROUP BY queue, at, kind, bin;

-- name: retention_rollup_oldest
SELECT MIN(at) AS at FROM queue_rollup WHERE namespace = :ns;

-- name: retention_trim_rollup
-- Rollup rows of :ns from seconds before :upto (retention: at most a minute's rows a batch).
DELETE FROM queue_rollup WHERE namespace = :ns AND at < :upto;

-- name: set_invocation_resources
-- A submit's request (issue 34) on the row it just inserted: what was asked, and the same as
-- the columns the `fits` fragment compares. Only submits that state one (or whose queue has a
-- default) run it, so a plain submit writes what it always did.
UPDATE invocations SET resources = :resources, gpus = :gpus, gpu_type = :gpu_type,
    gpu_memory_gb = :gpu_memory_gb, cpus = :cpus, memory_gb = :memory_gb
WHERE id = :id;

-- name: set_queue_resources
UPDATE queues SET resources = :resources, updated_at = :now WHERE namespace = :ns AND name = :name;

-- name: place_invocation
-- Where a claimed attempt runs (the daemon picks its GPUs): fenced by the attempt's lease, so a
-- stale worker cannot write over the placement of a newer attempt.
UPDATE invocations SET placement = :placement
WHERE id = :id AND lease = :lease AND state = 'running'
RETURNING id;

-- name: queued_head
-- The head of a fifo claim among the jobs a worker could ever run (issue 34, no starvation):
-- the `fits` fragment bound to what the worker has in all, not what it has free. A worker
-- whose head does not fit what is free reserves for it (store/reservation.py); `pending` says
-- whether one already does (its `resources` mark).
SELECT id, namespace, queue, resources, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb,
    (SELECT reason FROM pending_reasons r WHERE r.id = invocations.id) AS pending
FROM invocations
WHERE queue IN (:queues) AND {claimable}
  {fits}
ORDER BY priority DESC, id ASC LIMIT 1;

-- name: hold_back
-- A new reservation names the jobs it holds back at once (`reserved_for:<head>`), not at the
-- next pending sweep: the head's queue's other queued jobs with a request that the reserving
-- worker could run (`fits` bound to what it has in all), the first :limit in claim order (the
-- sweep names any past them). A mark that says so already is left as it is.
INSERT INTO pending_reasons (id, namespace, queue, reason, words, at)
SELECT id, namespace, queue, :reason, :words, :now FROM invocations
WHERE queue = :queue AND {claimable} AND resources IS NOT NULL AND id <> :head
  {fits}
ORDER BY priority DESC, id ASC LIMIT :limit
ON CONFLICT (id) DO UPDATE SET reason = excluded.reason, words = excluded.words, at = excluded.at
WHERE pending_reasons.reason <> excluded.reason OR pending_reasons.words {is_not} excluded.words
RETURNING id;

-- name: release_held_back
-- The reservation is over (its worker took the head): the jobs it held back lose that reason at
-- once (index pending_reasons_by_queue).
DELETE FROM pending_reasons WHERE namespace = :ns AND queue = :queue AND reason = :reason
RETURNING id;

-- name: claim_id
-- Claim the head a worker reserved for, once it fits: still queued, or nothing.
{claim_queued_id};

-- name: claim_backfill
-- While a worker reserves for its head, only a job that fits what is free and surely ends
-- (its timeout_s) before the reservation could start (:start_bound) may run meanwhile.
UPDATE invocations
SET {claim_running}
WHERE id = (
    SELECT id FROM invocations
    WHERE queue IN (:queues) AND {claimable}
      {fits}
      AND timeout_s IS NOT NULL AND timeout_s <= :start_bound - :now
    ORDER BY priority DESC, id ASC LIMIT 1 {skip_locked})
RETURNING {claimed_columns};

-- name: queued_shapes
-- The distinct requests of queued jobs (index invocations_shapes), for the sweep that names
-- the ones no live daemon of their queue could ever run; the oldest of each, for the queue's
-- unschedulable_fail_after_s.
SELECT namespace, queue, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb,
    count(*) AS n, MIN(resources) AS sample
FROM invocations WHERE state = 'queued' AND resources IS NOT NULL
GROUP BY namespace, queue, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb;

-- name: live_workers
-- Every worker row that heartbeats (all namespaces): what the sweep checks requests against
-- (its load: the GPUs it took out of its offer since it registered).
SELECT namespace, name, queues, info, load FROM workers
WHERE heartbeat_at >= :since AND state <> 'gone';

-- fragment: queued_request
-- One request's queued jobs in a queue, as the sweep binds it (store/schedulable.py SHAPE).
-- {is} compares NULLs as equal: NULL columns are parts of a request too.
namespace = :ns AND queue = :queue AND state = 'queued' AND resources IS NOT NULL
  AND gpus {is} :gpus AND gpu_type {is} :gpu_type AND gpu_memory_gb {is} :gpu_memory_gb
  AND cpus {is} :cpus AND memory_gb {is} :memory_gb

-- fragment: fresh_mark
-- A worker's reservation mark (`mark_reserved`), or a job its reservation holds back
-- (`hold_back`), written after the sweep at :now began: the sweep read the live workers and the
-- reserved heads before, and may not have seen that worker or that head yet.
((pending_reasons.reason = 'resources'
    OR substr(pending_reasons.reason, 1, 13) = 'reserved_for:')
  AND pending_reasons.at > :now)

-- name: set_pending
-- One request's queued jobs in a queue get a pending reason, those whose reason or words differ
-- only. The jobs are read, not locked: the reason lives in pending_reasons (migration 35),
-- which no claim locks. A reservation mark written since the sweep began (:now) stays.
INSERT INTO pending_reasons (id, namespace, queue, reason, words, at)
SELECT id, namespace, queue, :reason, :words, :now FROM invocations
WHERE {queued_request}
  AND id <> :keep
ON CONFLICT (id) DO UPDATE SET reason = excluded.reason, words = excluded.words, at = excluded.at
WHERE (pending_reasons.reason <> excluded.reason OR pending_reasons.words {is_not} excluded.words)
  AND NOT {fresh_mark}
RETURNING id;

-- name: clear_pending
-- One request's queued jobs in a queue that a live daemon could run lose their reason.
DELETE FROM pending_reasons
WHERE namespace = :ns AND queue = :queue AND id <> :keep AND NOT {fresh_mark}
  AND pending_reasons.reason <> 'gang'
  AND id IN (SELECT id FROM invocations WHERE {queued_request})
RETURNING id;

-- name: unmark_pending
-- A placed attempt's job left the queue: its reason goes with it at once (a reservation's
-- `resources` mark on it would otherwise name it a reserved head if it came back queued).
DELETE FROM pending_reasons WHERE id = :id RETURNING id;

-- name: forget_pending
-- The reasons of jobs that left the queue (claimed, cancelled, failed, deleted): only a queued
-- job shows one, and the table holds no more rows than the queues hold such jobs.
DELETE FROM pending_reasons WHERE NOT EXISTS (
    SELECT 1 FROM invocations i WHERE i.id = pending_reasons.id AND i.state = 'queued')
RETURNING id;

-- name: mark_reserved
-- A worker reserves for this head of its claim order (store/reservation.py): said once, so that
-- the sweep names the jobs the reservation holds back `reserved_for:<id>`.
INSERT INTO pending_reasons (id, namespace, queue, reason, words, at)
SELECT id, namespace, queue, 'resources', :words, :now FROM invocations
WHERE id = :id AND state = 'queued'
ON CONFLICT (id) DO UPDATE SET reason = 'resources', words = excluded.words, at = excluded.at
WHERE pending_reasons.reason <> 'resources'
RETURNING id;

-- name: reserved_heads
-- The queued jobs workers reserve for, in claim order within each queue (the first one is the
-- reservation that holds the queue's other jobs back). From the few reason rows to their jobs:
-- CROSS JOIN keeps SQLite's join in that order, where a plain JOIN walked every queued job in
-- claim order (index invocations_claim) to skip the sort, 0.85 s at 1M queued, in every sweep.
SELECT i.namespace, i.queue, i.id, i.resources FROM pending_reasons r
CROSS JOIN invocations i
WHERE i.id = r.id AND r.reason = 'resources' AND i.state = 'queued' AND i.resources IS NOT NULL
ORDER BY i.namespace, i.queue, i.priority DESC, i.id ASC;

-- name: fail_unschedulable
-- The queue's unschedulable_fail_after_s: jobs of a request no daemon could run, waiting longer,
-- fail with the reason instead of waiting forever. A job a claim holds this instant is left to
-- it: waiting for that claim while the sweep holds reasons a claim may write could deadlock.
UPDATE invocations SET state = 'failed', error = :words, finished_at = :now
WHERE state = 'queued' AND id IN (
    SELECT id FROM invocations
    WHERE {queued_request} AND created_at <= :before
    {skip_locked})
RETURNING id;

-- name: unschedulable_counts
-- lakeshore_jobs_unschedulable, per queue (index pending_reasons_by_queue).
SELECT r.namespace, r.queue, count(*) AS n FROM pending_reasons r
JOIN invocations i ON i.id = r.id
WHERE r.reason = 'unschedulable' AND i.state = 'queued'
GROUP BY r.namespace, r.queue;

-- name: unschedulable_in_queue
SELECT count(*) AS n FROM pending_reasons r JOIN invocations i ON i.id = r.id
WHERE r.namespace = :ns AND r.queue = :queue AND r.reason = 'unschedulable'
  AND i.state = 'queued';

-- name: gangs_waiting_in_queue
-- Queued gangs (issue 47) of a queue, waiting for all their parts (index invocations_gangs).
SELECT count(*) AS n FROM invocations {gangs_index}
WHERE namespace = :ns AND queue = :queue AND state = 'queued' AND nodes > 1;

-- name: waiting_in_queue
-- Queued jobs that wait for the controller to launch a daemon (index pending_reasons_by_queue).
SELECT count(*) AS n FROM pending_reasons r JOIN invocations i ON i.id = r.id
WHERE r.namespace = :ns AND r.queue = :queue AND r.reason = 'waiting_for_capacity'
  AND i.state = 'queued';

-- name: pending_by_queue
-- The dashboard's counts of both, every queue of a namespace in one read: what
-- unschedulable_in_queue and waiting_in_queue count (index pending_reasons_by_queue).
SELECT r.queue, r.reason, count(*) AS n FROM pending_reasons r JOIN invocations i ON i.id = r.id
WHERE r.namespace = :ns AND r.reason IN ('unschedulable', 'waiting_for_capacity')
  AND i.state = 'queued'
GROUP BY r.queue, r.reason;

-- name: release_preempted
-- Issue 35: a preempted attempt goes back to the queue at once (no backoff: not_before = 0) and
-- keeps its place (its id orders it among its priority: ahead of everything submitted after
-- it). The attempt it used stays counted in `attempt` but not against max_attempts; `:cause`
-- is why, as the worker decided it. Refused (no row) once the job has no preemption left: the
-- store then ends it failed.
UPDATE invocations SET state = 'queued', lease = NULL, worker = NULL, not_before = 0,
    preemptions = preemptions + 1, ended_by = :cause
WHERE id = :id AND lease = :lease AND state = 'running' AND preemptions < max_preemptions
RETURNING id, nodes;

-- name: preemptions_of
SELECT preemptions, max_preemptions, attempt FROM invocations WHERE id = :id;

-- name: set_max_preemptions
-- A submit's (or its queue's) max_preemptions when it is not the column's default of 20: one
-- statement more only for the submits that set it.
UPDATE invocations SET max_preemptions = :max_preemptions WHERE id = :id;

-- name: count_preemption
-- The preemption that ended a job out of preemptions counts too (the row says how many it had).
UPDATE invocations SET preemptions = preemptions + 1 WHERE id = :id;

-- name: checkpoint_of
-- The checkpoint a new one replaces ({for_update}: the write below follows in this transaction).
SELECT checkpoint, lease, state FROM invocations WHERE id = :id {for_update};

-- name: set_checkpoint
-- The job's last checkpoint (an encoded spilled Ref, never the state): fenced by the attempt's
-- lease, as a post is, so a stale worker cannot overwrite a newer attempt's checkpoint.
UPDATE invocations SET checkpoint = :checkpoint
WHERE id = :id AND lease = :lease AND state = 'running' AND lease_expires_at >= :now
RETURNING id;

-- name: note_cause
-- Why the worker is about to end a running attempt (issue 35), written before it signals the
-- job: a daemon that dies between the two leaves the cause it decided, never one guessed later.
UPDATE invocations SET ended_by = :cause
WHERE id = :id AND lease = :lease AND state = 'running'
RETURNING id;
-- name: promote_due
-- Delays (issue 36, sdk/workflow.py): scheduled jobs of these queues whose time has come, to
-- queued, oldest due first, a bounded batch at a time (a claim that found one due runs this
-- before it claims; index invocations_scheduled_queue of migration 32). not_before stays: it
-- is in the past, and the claims' own test on it passes.
UPDATE invocations SET state = 'queued'
WHERE id IN (
    SELECT id FROM invocations
    WHERE namespace = :ns AND queue IN (:queues) AND state = 'scheduled' AND not_before <= :now
    ORDER BY not_before LIMIT :limit {skip_locked})
RETURNING id;

-- fragment: scheduled_due
-- A scheduled job whose time has come (index invocations_scheduled).
state = 'scheduled' AND not_before <= :now

-- fragment: deadline_passed
-- A queued job past its queue's deadline_cutoff_s, never started.
state = 'queued' AND deadline_at IS NOT NULL AND deadline_at < :now

-- fragment: lease_ran_out
-- A running attempt whose lease ran out with no settle (index invocations_leases).
state = 'running' AND lease_expires_at < :now

-- name: sweep_due
-- Whether the expired-lease sweep has anything to move, read before it takes the write lock:
-- most sweeps (the server's every second, an embedded process's first read) find nothing, and
-- a CLI read waited behind any writer's commit to change nothing (issue 45).
SELECT (EXISTS (SELECT 1 FROM invocations WHERE {scheduled_due})
    OR EXISTS (SELECT 1 FROM invocations WHERE {deadline_passed})
    OR EXISTS (SELECT 1 FROM invocations WHERE {lease_ran_out})
    OR EXISTS (SELECT 1 FROM gangs WHERE state = 'holding' AND wait_until < :now)
    OR EXISTS (SELECT 1 FROM gang_parts
        WHERE state IN ('held', 'started') AND lease_expires_at < :now)) AS due;

-- name: promote_due_all
-- The sweep's: every namespace's due scheduled jobs (index invocations_scheduled).
UPDATE invocations SET state = 'queued'
WHERE id IN (
    SELECT id FROM invocations
    WHERE {scheduled_due}
    ORDER BY not_before LIMIT :limit {skip_locked})
RETURNING id, namespace, queue;

-- name: lock_parents
-- Dependencies (issue 36, sdk/plane/dependencies.py): a submit's parents outside its batch,
-- marked as having dependents and locked until the submit commits, with their states as they
-- stand then: a parent's settle on Postgres waits for the lock, and its trigger then finds the
-- new edges (a parent that ended first is read ended here). Another namespace's id matches
-- nothing: unknown.
UPDATE invocations SET dependents = COALESCE(dependents, 0) + 1
WHERE namespace = :ns AND id IN (:ids)
RETURNING id, state;

-- name: mark_parents
-- Parents submitted in the same batch as their child: marked as having dependents.
UPDATE invocations SET dependents = COALESCE(dependents, 0) + 1
WHERE namespace = :ns AND id IN (:ids)
RETURNING id;

-- name: insert_dependencies
-- A new child's edges, each already ended parent's with its state (so its end is not counted
-- again): the child's open_parents counted the others.
INSERT INTO dependencies (parent, child, parent_state)
SELECT id, :child, CASE WHEN state IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout')
    THEN state END
FROM invocations WHERE namespace = :ns AND id IN (:parents);

-- name: parent_results
-- The results a claimed child's arguments take (dls.output): its succeeded parents'.
SELECT id, result FROM invocations WHERE id IN (:ids) AND state = 'succeeded';

-- name: waiting_unblocked
-- The sweep's safety net: waiting jobs none of whose parents is still live (a parent gone, or
-- one whose end the trigger missed), a batch in id order from :after.
SELECT i.id FROM invocations i
WHERE i.state = 'waiting' AND i.id > :after AND NOT EXISTS (
    SELECT 1 FROM dependencies d JOIN invocations p ON p.id = d.parent
    WHERE d.child = i.id
      AND p.state NOT IN ('succeeded', 'failed', 'cancelled', 'killed', 'timeout'))
ORDER BY i.id LIMIT :limit;

-- name: parents_of
-- A child's parents as they stand (state NULL: the parent row is gone), oldest first.
SELECT d.parent AS id, COALESCE(p.state, d.parent_state) AS state
FROM dependencies d LEFT JOIN invocations p ON p.id = d.parent
WHERE d.child = :child ORDER BY d.parent;

-- name: settle_waiting
-- The safety net's verdict on one waiting job whose parents all ended: cancelled naming
-- a parent that did not succeed (:failed = 1, its words in :error) unless after_failure is
-- 'run', else released as the trigger would have released it.
UPDATE invocations SET
    open_parents = 0,
    state = CASE WHEN :failed = 1 AND after_failure IS NULL THEN 'cancelled'
        WHEN not_before > :now THEN 'scheduled' ELSE 'queued' END,
    error = CASE WHEN :failed = 1 AND after_failure IS NULL THEN :error ELSE error END,
    finished_at = CASE WHEN :failed = 1 AND after_failure IS NULL THEN :now
        ELSE finished_at END
WHERE id = :id AND state = 'waiting'
RETURNING id, state;

-- name: end_dependencies
-- The safety net's: a settled child's edges, ended.
UPDATE dependencies SET parent_state = COALESCE(
    (SELECT state FROM invocations WHERE id = dependencies.parent), 'gone')
WHERE child = :child AND parent_state IS NULL;

-- name: cancel_waiting
-- The safety net's (or a submit's recheck): a waiting job one of whose parents did not succeed,
-- cancelled with :error unless after_failure is 'run'.
UPDATE invocations SET state = 'cancelled', open_parents = 0, error = :error, finished_at = :now
WHERE id = :id AND state = 'waiting' AND after_failure IS NULL
RETURNING id;

-- name: recount_parents
UPDATE invocations SET open_parents = :n WHERE id = :id AND state = 'waiting';

-- name: released_queues
-- The queues where these parents' settles just made dependents claimable (an ack's wake-up
-- goes there only: a join's other parents wake nobody).
SELECT DISTINCT c.namespace, c.queue FROM dependencies d JOIN invocations c ON c.id = d.child
WHERE d.parent IN (:ids) AND c.state = 'queued';
-- name: schedule_insert
-- Cron schedules (issue 36, migration 29, store/schedules.py). A name already used inserts
-- nothing: the store then updates the row it reads (a put).
INSERT INTO schedules (namespace, name, queue, cron, tz, catchup, overlap, state, payload,
    priority, max_attempts, timeout_s, resources, max_preemptions, next_fire_at, created_at,
    updated_at)
VALUES (:ns, :name, :queue, :cron, :tz, :catchup, :overlap, 'active', :payload, :priority,
    :max_attempts, :timeout_s, :resources, :max_preemptions, :next_fire_at, :now, :now)
ON CONFLICT (namespace, name) DO NOTHING
RETURNING name;

-- name: schedule_update
-- A put over an existing schedule: its template and timing; state, history and counts stay.
UPDATE schedules SET queue = :queue, cron = :cron, tz = :tz, catchup = :catchup,
    overlap = :overlap, payload = :payload, priority = :priority,
    max_attempts = :max_attempts, timeout_s = :timeout_s, resources = :resources,
    max_preemptions = :max_preemptions, next_fire_at = :next_fire_at, updated_at = :now
WHERE namespace = :ns AND name = :name;

-- name: schedule_get
SELECT * FROM schedules WHERE namespace = :ns AND name = :name;

-- name: schedule_list
SELECT * FROM schedules WHERE namespace = :ns ORDER BY name;

-- name: schedule_delete
DELETE FROM schedules WHERE namespace = :ns AND name = :name RETURNING name;

-- name: schedule_set_state
-- Pause or resume; a resume also says from which slot firing starts again.
UPDATE schedules SET state = :state, next_fire_at = :next_fire_at, updated_at = :now
WHERE namespace = :ns AND name = :name
RETURNING name;

-- name: schedules_due
-- The sweep's probe (index schedules_due): active schedules whose next slot has come.
SELECT namespace, name, queue FROM schedules
WHERE state = 'active' AND next_fire_at <= :now
ORDER BY next_fire_at LIMIT :limit;

-- name: schedule_for_fire
-- The row one firing works on, locked for its transaction (Postgres; SQLite's writer holds the
-- database already): another firer skips it instead of waiting to find it fired.
SELECT * FROM schedules
WHERE namespace = :ns AND name = :name AND state = 'active' AND next_fire_at <= :now
{skip_locked};

-- name: schedule_job_state
SELECT state FROM invocations WHERE id = :id;

-- name: schedule_fired
-- The firing's compare-and-set: only from the slot it read (:due), so of two firers that read
-- the same row, one moves it on and the other's whole transaction (its job too) rolls back.
UPDATE schedules SET next_fire_at = :next_fire_at,
    last_slot = COALESCE(:slot, last_slot),
    last_fired_at = COALESCE(:fired_at, last_fired_at),
    last_job = COALESCE(:job, last_job),
    fired = fired + :fired, missed = missed + :missed,
    last_error = COALESCE(:error, last_error)
WHERE namespace = :ns AND name = :name AND state = 'active' AND next_fire_at = :due
RETURNING name;

-- name: schedules_next
-- The earliest slot still to come (index schedules_due): a process that found nothing due sets
-- its wake-up for then, so a claim waiting on that queue fires and takes the job on time.
SELECT namespace, queue, next_fire_at FROM schedules
WHERE state = 'active' AND next_fire_at > :now
ORDER BY next_fire_at LIMIT 1;

-- Job runtimes (issue 46, store/runtimes.py): bundles as manifests over content-addressed
-- blobs, each per namespace.

-- name: set_invocation_runtime
-- What a submit's job brings (its runtime object) on the row it just inserted; only a submit
-- that names one runs it.
UPDATE invocations SET runtime = :runtime, runtime_bundle = :bundle WHERE id = :id;

-- name: runtime_blobs_present
SELECT sha256 FROM runtime_blobs WHERE namespace = :ns AND sha256 IN (:shas);

-- name: insert_runtime_blob
-- A blob is named by its content: one already stored is the same bytes, and stays.
INSERT INTO runtime_blobs (namespace, sha256, size, data, created_at)
VALUES (:ns, :sha, :size, :data, :now)
ON CONFLICT (namespace, sha256) DO NOTHING
RETURNING sha256;

-- name: get_runtime_blob
SELECT data FROM runtime_blobs WHERE namespace = :ns AND sha256 = :sha;

-- name: insert_runtime_manifest
INSERT INTO runtime_manifests (namespace, digest, entries, files, bytes, created_at)
VALUES (:ns, :digest, :entries, :files, :bytes, :now)
ON CONFLICT (namespace, digest) DO UPDATE SET created_at = excluded.created_at
RETURNING digest;

-- name: insert_runtime_manifest_blob
INSERT INTO runtime_manifest_blobs (namespace, digest, sha256) VALUES (:ns, :digest, :sha)
ON CONFLICT (namespace, digest, sha256) DO NOTHING;

-- name: get_runtime_manifest
SELECT entries FROM runtime_manifests WHERE namespace = :ns AND digest = :digest;

-- name: runtime_manifest_known
SELECT digest FROM runtime_manifests WHERE namespace = :ns AND digest = :digest;

-- name: trim_runtime_manifests
-- Retention: manifests no invocation names any more, put longer ago than the grace a producer
-- has between putting a bundle and submitting the job that names it.
DELETE FROM runtime_manifests
WHERE namespace = :ns AND created_at < :cutoff AND NOT EXISTS (
    SELECT 1 FROM invocations i
    WHERE i.namespace = runtime_manifests.namespace
        AND i.runtime_bundle = runtime_manifests.digest)
RETURNING digest;

-- name: trim_runtime_manifest_blobs
DELETE FROM runtime_manifest_blobs WHERE namespace = :ns AND digest = :digest;

-- name: trim_runtime_blobs
-- Blobs no kept manifest names, past the same grace (a producer puts blobs, then the manifest).
DELETE FROM runtime_blobs
WHERE namespace = :ns AND created_at < :cutoff AND NOT EXISTS (
    SELECT 1 FROM runtime_manifest_blobs m
    WHERE m.namespace = runtime_blobs.namespace AND m.sha256 = runtime_blobs.sha256)
RETURNING size;
-- name: gangs_queued
-- Whether a claim's queues hold a queued gang (index invocations_gangs, empty but for them): a
-- claim that read its queue row already has it as `queue_for_claim`'s `gangs`.
SELECT 1 AS found FROM invocations {gangs_index}
WHERE namespace = :ns AND queue IN (:queues) AND state = 'queued' AND nodes > 1 LIMIT 1;

-- name: gang_held_by
-- The part a worker holds and has not started (store/gangs.py): such a worker claims nothing
-- else until its gang starts or lets it go (a gang past its gang_wait_s is as good as let go:
-- the sweep does that next). Worker names are a namespace's own.
SELECT p.lease FROM gang_parts p JOIN gangs g ON g.gang = p.gang
WHERE p.worker = :worker AND p.state = 'held' AND p.lease_expires_at >= :now
  AND g.namespace = :ns AND g.wait_until >= :now
LIMIT 1;

-- fragment: gang_columns
-- What a gang's part is handed of its job, as a claim hands a job (`claimed_columns`), with its
-- request's columns for the fit.
id, namespace, queue, payload, attempt, timeout_s, priority, signature, resources, preemptions,
    checkpoint, inputs, nodes, gpus, gpu_type, gpu_memory_gb, cpus, memory_gb, hang_timeout_s

-- name: gang_holding_in
-- The gang a queue holds parts of (at most one: store/gangs.py), if its job is still queued.
SELECT {gang_columns} FROM invocations
WHERE id = (SELECT g.id FROM gangs g WHERE g.namespace = :ns AND g.queue = :queue
    AND g.state = 'holding' LIMIT 1)
  AND {takeable};

-- name: gang_head_in
-- The queue's oldest claimable gang, in the queue's order (index invocations_gangs).
SELECT {gang_columns} FROM invocations {gangs_index}
WHERE queue = :queue AND nodes > 1 AND {takeable}
ORDER BY priority DESC, id ASC LIMIT 1;

-- name: gang_first_single
-- The first one-box job this claimer could take now, in the claim order (fifo and priority:
-- oldest first; filo: newest), as the claim statements find it (the claim index, stopped at
-- its first row): whether it comes before the queue's head gang is store/gangs.py's to say.
SELECT id, priority FROM invocations
WHERE queue = :queue AND {claimable}
  {fits}
ORDER BY priority DESC, id ASC LIMIT 1;

-- name: gang_first_single_newest
SELECT id, priority FROM invocations
WHERE queue = :queue AND {claimable}
  {fits}
ORDER BY priority DESC, id DESC LIMIT 1;

-- name: gang_lock
-- The job whose part is taken, locked ({for_update}: two claims of parts of one gang on
-- Postgres take their turns; SQLite's writers are serial already), still queued.
SELECT id, attempt FROM invocations WHERE id = :id AND state = 'queued' {for_update};

-- name: gang_live
-- The job's live gang attempt (index gangs_live: at most one).
SELECT * FROM gangs WHERE id = :id AND state IN ('holding', 'started');

-- name: gang_insert
INSERT INTO gangs (gang, id, namespace, queue, attempt, nodes, state, held, wait_until,
    created_at)
VALUES (:gang, :id, :ns, :queue, :attempt, :nodes, 'holding', 0, :wait_until, :now);

-- name: gang_parts_of
SELECT * FROM gang_parts WHERE gang = :gang ORDER BY rank, held_at;

-- name: gang_live_parts
-- The parts of the job's live gang attempt (none when it has none), read by the job's id so a
-- claim asks for them in the same round trip as for the gang itself (store/gang_claims.py).
SELECT p.* FROM gang_parts p JOIN gangs g ON g.gang = p.gang
WHERE g.id = :id AND g.state IN ('holding', 'started')
ORDER BY p.rank, p.held_at;

-- name: gang_view
-- A gang and its parts in one statement, so a read never mixes a gang's state before a commit
-- with its parts' after it (Postgres reads each statement of a transaction afresh).
SELECT p.rank, p.worker, p.addr, p.port, p.state, g.attempt, g.nodes, g.state AS gang_state,
    g.held, g.wait_until, g.outcome, g.failed_rank, g.failed_worker, g.failed_why, g.version,
    g.noticed_rank, g.noticed_at, g.notice_until, COALESCE(g.progress_at, g.started_at) AS progress_at,
    g.hung_rank, g.hung_at
FROM gang_parts p JOIN gangs g ON g.gang = p.gang
WHERE p.gang = :gang ORDER BY p.rank, p.held_at;

-- name: gang_part_insert
INSERT INTO gang_parts (lease, gang, id, rank, worker, addr, lease_expires_at, state, held_at)
VALUES (:lease, :gang, :id, :rank, :worker, :addr, :expires, 'held', :now);

-- name: gang_set_held
UPDATE gangs SET held = :held, version = version + 1 WHERE gang = :gang;

-- name: gang_bump
-- A change to a part that its gang's waiters wake for (`version`).
UPDATE gangs SET version = version + 1 WHERE gang = :gang;

-- name: gang_start
-- All parts held: the attempt starts, under rank 0's lease (its settles are today's).
UPDATE invocations
SET state = 'running', attempt = attempt + 1, lease = :lease, lease_expires_at = :expires,
    worker = :worker, started_at = :now
WHERE id = :id AND state = 'queued'
RETURNING id;

-- name: gang_started
UPDATE gangs SET state = 'started', started_at = :now, version = version + 1 WHERE gang = :gang;

-- name: gang_parts_started
UPDATE gang_parts SET state = 'started' WHERE gang = :gang AND state = 'held';

-- name: gang_part
-- A part by its lease, with its gang's state (a settle or a read of it).
SELECT p.lease, p.gang, p.id, p.rank, p.worker, p.state, p.lease_expires_at, p.result,
    g.state AS gang_state, g.attempt, g.nodes, g.outcome
FROM gang_parts p JOIN gangs g ON g.gang = p.gang WHERE p.lease = :lease;

-- name: gang_of
SELECT * FROM gangs WHERE gang = :gang;

-- name: gang_end
-- The attempt is over for every part: :outcome succeeded | failed | released | cancelled; the
-- part that ended it first, if one did.
UPDATE gangs SET state = 'ended', ended_at = :now, outcome = :outcome,
    failed_rank = :rank, failed_worker = :worker, failed_why = :why, version = version + 1
WHERE gang = :gang AND state IN ('holding', 'started')
RETURNING gang;

-- name: gang_parts_end
-- Every live part of an ended attempt: the one that ended it (:lease) as :first, the rest as
-- :rest; a part that acked keeps it.
UPDATE gang_parts SET state = CASE WHEN lease = :lease THEN :first ELSE :rest END
WHERE gang = :gang AND state IN ('held', 'started');

-- name: gang_part_set
UPDATE gang_parts SET state = :state WHERE lease = :lease;

-- name: gang_part_acked
UPDATE gang_parts SET state = 'acked', result = :result
WHERE lease = :lease AND state IN ('started', 'acked')
RETURNING lease;

-- name: gang_ready
-- A part says where it listens (its address, and a port it found free: rank 0's is the
-- gang's MASTER_PORT), while its attempt is live.
UPDATE gang_parts SET addr = COALESCE(:addr, addr), port = COALESCE(:port, port)
WHERE lease = :lease AND id = :id AND state IN ('held', 'started')
RETURNING lease, gang;

-- name: gang_notice
-- A started part's box is going away (a preemption notice): its gang records the first
-- notice (a later one only brings the end of the grace closer) and its waiters wake.
UPDATE gangs SET noticed_rank = COALESCE(noticed_rank, :rank),
    noticed_at = COALESCE(noticed_at, :now),
    notice_until = CASE WHEN notice_until IS NULL OR :until < notice_until THEN :until
        ELSE notice_until END,
    version = version + 1
WHERE gang = :gang AND state = 'started'
RETURNING gang;

-- name: gang_progress
-- A started part's child moved (daemon/hangs.py): the gang's newest move. Not a change its
-- waiters wake for (no version): a part that wonders whether the gang hangs reads it.
UPDATE gangs SET progress_at = :now
WHERE gang = :gang AND state = 'started' AND (progress_at IS NULL OR progress_at < :now)
RETURNING gang;

-- name: gang_hung
-- A part's daemon found the started gang hung (daemon/hangs.py): the first one is kept, and the
-- gang's waiters wake (each part dumps its stacks).
UPDATE gangs SET hung_rank = COALESCE(hung_rank, :rank), hung_at = COALESCE(hung_at, :now),
    version = version + 1
WHERE gang = :gang AND state = 'started'
RETURNING gang;

-- name: gang_place
-- Where a part runs that the invocation's row does not hold the lease of (rank 0 while held,
-- any rank above 0).
UPDATE gang_parts SET placement = :placement
WHERE lease = :lease AND id = :id AND state IN ('held', 'started')
RETURNING lease;

-- name: gang_renew
-- Leases of parts (held, or started): renewed as a job's lease is.
UPDATE gang_parts SET lease_expires_at = :expires
WHERE lease IN (:leases) AND state IN ('held', 'started') AND lease_expires_at >= :now
RETURNING lease, id;

-- name: gang_renew_rows
-- A started gang's row lives while any part does: rank 0 may have acked and stopped renewing
-- while the others run. Each part's own lease still ends the attempt when it runs out.
UPDATE invocations SET lease_expires_at = :expires
WHERE id IN (:ids) AND state = 'running' AND nodes > 1 AND lease_expires_at >= :now
  AND lease_expires_at < :expires;

-- name: kill_requested_of
SELECT id, kill_requested FROM invocations WHERE id IN (:ids);

-- name: gangs_past_wait
-- Holding gangs whose gang_wait_s passed, or whose job left the queue (cancelled).
SELECT g.gang, g.id, g.namespace, g.queue, g.nodes, g.held, g.wait_until FROM gangs g
WHERE g.state = 'holding' AND (g.wait_until < :now
    OR NOT EXISTS (SELECT 1 FROM invocations i WHERE i.id = g.id AND i.state = 'queued'));

-- name: gang_parts_expired
-- Parts whose lease ran out with no settle (index gang_parts_live).
SELECT p.lease, p.gang, p.id, p.rank, p.worker, p.state FROM gang_parts p
WHERE p.state IN ('held', 'started') AND p.lease_expires_at < :now;

-- name: gang_pending
-- A queued gang's pending reason (`gang`), with how many of its parts are held.
INSERT INTO pending_reasons (id, namespace, queue, reason, words, at)
SELECT id, namespace, queue, 'gang', :words, :now FROM invocations
WHERE id = :id AND state = 'queued'
ON CONFLICT (id) DO UPDATE SET reason = 'gang', words = excluded.words, at = excluded.at;

-- name: gang_last_failed
-- The worker whose part ended the job's newest failed gang attempt first: its retry avoids it.
SELECT failed_worker, ended_at FROM gangs WHERE id = :id AND outcome = 'failed'
ORDER BY attempt DESC LIMIT 1;

-- name: live_workers_in
-- The workers of one namespace that heartbeat and take work: those a gang's parts may go to.
SELECT namespace, name, queues, info, load FROM workers
WHERE namespace = :ns AND heartbeat_at >= :since AND state = 'alive';

-- name: gang_too_few
-- A queued gang the live daemons of its queue cannot complete: named, as the sweep names a
-- request no daemon could run (`unschedulable`), or one the controller launches daemons for
-- (`waiting_for_capacity`).
INSERT INTO pending_reasons (id, namespace, queue, reason, words, at)
SELECT id, namespace, queue, :reason, :words, :now FROM invocations
WHERE id = :id AND state = 'queued'
ON CONFLICT (id) DO UPDATE SET reason = excluded.reason, words = excluded.words,
    at = excluded.at;

-- name: gang_last
-- The job's newest gang attempt (a read of its record).
SELECT * FROM gangs WHERE id = :id ORDER BY created_at DESC LIMIT 1;

-- name: set_invocation_nodes
-- A gang's width (issue 47) on the row its submit just inserted: only a gang's submit runs it.
UPDATE invocations SET nodes = :nodes WHERE id = :id;

-- name: set_invocation_hang_timeout
-- A job's hang timeout (issue 47) on the row its submit just inserted: only a submit that sets
-- one runs it.
UPDATE invocations SET hang_timeout_s = :hang_timeout_s WHERE id = :id;
