-- 050_control: backfill_pause / resume / cancel / retry / drop -- their
-- error cases, their idempotence (each answers "changed anything"), and
-- backfill_partitions / backfill_status while a pass is steered.
\set ON_ERROR_STOP 1
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
CREATE EXTENSION IF NOT EXISTS pgtap;

DROP TABLE IF EXISTS bf050_done, bf050_slow CASCADE;
DROP FUNCTION IF EXISTS bf_test_poll(text, float8);
DROP ROLE IF EXISTS bf050_other;
CREATE ROLE bf050_other LOGIN;

CREATE TABLE bf050_done (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
INSERT INTO bf050_done (id) SELECT g FROM generate_series(1, 100) g;
CREATE TABLE bf050_slow (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
INSERT INTO bf050_slow (id) SELECT g FROM generate_series(1, 2000) g;
ANALYZE bf050_done, bf050_slow;
RESET backfill.environment;

\ir include/poll.psql

SELECT * FROM no_plan();

-- ------------------------------------------------------------------
-- unknown names
-- ------------------------------------------------------------------
SELECT throws_ok($$SELECT backfill_pause('bf050_no_such')$$, 'BF002', NULL,
                 'pause of an unknown name: UNKNOWN (BF002)');
SELECT throws_ok($$SELECT backfill_resume('bf050_no_such')$$, 'BF002', NULL,
                 'resume of an unknown name: UNKNOWN (BF002)');
SELECT throws_ok($$SELECT backfill_cancel('bf050_no_such')$$, 'BF002', NULL,
                 'cancel of an unknown name: UNKNOWN (BF002)');
SELECT throws_ok($$SELECT backfill_retry('bf050_no_such')$$, 'BF002', NULL,
                 'retry of an unknown name: UNKNOWN (BF002)');
SELECT is(backfill_drop('bf050_no_such'), false,
          'drop of an unknown name: false (nothing to drop), no error');

-- ------------------------------------------------------------------
-- a declaration that never ran
-- ------------------------------------------------------------------
SELECT backfill_declare('bf050_never', 'bf050_done', 'c = 0',
    'UPDATE bf050_done SET c = c + 1 WHERE id BETWEEN $1 AND $2', guard => false);
SELECT is(backfill_pause('bf050_never'), false, 'pause with no running pass: false');
SELECT is(backfill_resume('bf050_never'), false, 'resume with no running pass: false');
SELECT is(backfill_cancel('bf050_never'), false, 'cancel with no running pass: false');
SELECT is(backfill_retry('bf050_never'), false, 'retry of a never-run declaration: false');
SELECT is_empty($$SELECT * FROM backfill.ledger WHERE declaration = 'bf050_never'$$,
                'the no-op controls wrote no ledger row');
SELECT is(backfill_drop('bf050_never'), true, 'drop of a never-run declaration: true');
SELECT is_empty($$SELECT * FROM backfill.declaration WHERE name = 'bf050_never'$$,
                'the declaration is gone');
SELECT is(backfill_drop('bf050_never'), false, 'drop again: false');
SELECT throws_ok($$SELECT backfill_pause('bf050_never')$$, 'BF002', NULL,
                 'pause of a dropped declaration: UNKNOWN (BF002)');

-- ------------------------------------------------------------------
-- a completed pass that wrote rows
-- ------------------------------------------------------------------
SELECT backfill_declare('bf050_done', 'bf050_done', 'c = 0',
    'UPDATE bf050_done SET c = c + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 50, rate => 1000, guard => false);
SELECT backfill_run('bf050_done') AS done_run \gset
SELECT is(backfill_wait(:done_run, '300 s'), 'completed', 'the small pass completes');
SELECT is((SELECT rows FROM backfill.ledger WHERE run_id = :done_run), 100::bigint,
          'it wrote 100 rows');
SELECT is(backfill_pause('bf050_done'), false, 'pause after the pass ended: false');
SELECT is(backfill_cancel('bf050_done'), false, 'cancel after the pass ended: false');
SELECT is(backfill_retry('bf050_done'), false, 'retry with nothing failed: false');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf050_done'), 1::bigint,
          'retry with nothing failed started no new pass');
SELECT throws_ok($$SELECT backfill_drop('bf050_done')$$, 'BF009', NULL,
                 'drop after a pass wrote rows: IRREVERSIBLE (BF009)');
SELECT isnt_empty($$SELECT * FROM backfill.declaration WHERE name = 'bf050_done'$$,
                  'the refused drop kept the declaration');

-- its table dropped, a backfill that wrote rows can be neither reverted nor
-- declared again: abandon => true drops it as it is (a new user's finding)
CREATE TABLE bf050_gone (id int PRIMARY KEY, c int NOT NULL DEFAULT 0);
INSERT INTO bf050_gone (id) SELECT g FROM generate_series(1, 40) g;
SELECT backfill_declare('bf050_gone', 'bf050_gone', 'c = 0', set => 'c = 1', batch_size => 50);
SELECT backfill_run('bf050_gone') AS gone_run \gset
SELECT is(backfill_wait(:gone_run, '300 s'), 'completed', 'a pass over a table about to go');
DROP TABLE bf050_gone;
SELECT throws_like($$SELECT backfill_drop('bf050_gone')$$,
                   '%cannot be dropped: it has written 40 rows%',
                   'its table gone, a plain drop is still refused (BF009)');
DO $$
BEGIN
    PERFORM backfill_drop('bf050_gone');
EXCEPTION WHEN OTHERS THEN
    DECLARE h text;
    BEGIN
        GET STACKED DIAGNOSTICS h = PG_EXCEPTION_HINT;
        IF h NOT LIKE '%backfill_drop(''bf050_gone'', abandon => true)%' THEN
            RAISE EXCEPTION 'the BF009 hint does not name abandon: %', h;
        END IF;
    END;
END $$;
SELECT pass('the BF009 hint names backfill_drop(name, abandon => true)');
SELECT is(backfill_drop('bf050_gone', abandon => true), true, 'abandon => true drops it');
SELECT is_empty($$SELECT * FROM backfill.declaration WHERE name = 'bf050_gone'$$,
                'the declaration is gone');
SELECT is((SELECT state FROM backfill_pending() WHERE name = 'bf050_gone'), 'orphaned',
          'its ledger rows stay, orphaned');

-- ------------------------------------------------------------------
-- a slow pass: drop refused, other roles refused, pause/resume/cancel
-- (200 batches at 0.1 a second a lane: it cannot end while the file runs)
-- ------------------------------------------------------------------
SELECT backfill_declare('bf050_slow', 'bf050_slow', 'c = 0',
    'UPDATE bf050_slow SET c = c + 1 WHERE id BETWEEN $1 AND $2',
    batch_size => 10, rate => 0.1, max_parallel => 2, guard => false);
SELECT backfill_run('bf050_slow') AS slow_run \gset
SELECT ok(bf_test_poll($$SELECT count(*) = 8 FROM backfill.partition p
                        JOIN backfill.ledger l USING (run_id)
                       WHERE l.declaration = 'bf050_slow'$$, 300),
          'the slow pass was planned');

-- a lease is one partition per lane: wait until both lanes claimed, then
-- no holder may hold more than one partition
SELECT ok(bf_test_poll($$SELECT coalesce(sum(claims), 0) >= 2 FROM backfill_partitions('bf050_slow')$$, 300),
          'both lanes claimed a partition');
SELECT results_eq(
    $$SELECT count(*)::int, count(DISTINCT holder_pid)::int
        FROM backfill_partitions('bf050_slow') WHERE state = 'running'$$,
    $$VALUES (2, 2)$$,
    'two partitions are running, held by two distinct lanes (one lease per lane)');
SELECT is_empty(
    $$SELECT holder_pid FROM backfill_partitions('bf050_slow') WHERE state = 'running'
       GROUP BY holder_pid HAVING count(*) > 1$$,
    'no lane holds more than one partition');

SELECT results_eq(
    $$SELECT count(*)::int, min(run_id), max(run_id), min(part_no), max(part_no),
             count(*) FILTER (WHERE lo IS NULL)::int, count(*) FILTER (WHERE hi IS NULL)::int
        FROM backfill_partitions('bf050_slow')$$,
    format($$VALUES (8, %1$s::bigint, %1$s::bigint, 0, 7, 1, 1)$$, :slow_run),
    'backfill_partitions lists the 8 partitions of the newest pass, open at both ends');
SELECT results_eq(
    $$SELECT status, plan_method, partitions, paused FROM backfill_status('bf050_slow')$$,
    $$VALUES ('running', 'histogram', 8, false)$$,
    'backfill_status: running, histogram plan, 8 partitions, not paused');

SELECT throws_ok($$SELECT backfill_drop('bf050_slow')$$, 'BF008', NULL,
                 'drop while a pass runs: CONFLICT (BF008)');

-- another role may not steer postgres's backfill (RESET ROLE only runs
-- when the call wrongly succeeds)
SELECT throws_ok($$SET ROLE bf050_other; SELECT backfill_pause('bf050_slow'); RESET ROLE$$,
                 'BF016', NULL, 'pause by another role: PRIVILEGE (BF016)');
SELECT throws_ok($$SET ROLE bf050_other; SELECT backfill_resume('bf050_slow'); RESET ROLE$$,
                 'BF016', NULL, 'resume by another role: PRIVILEGE (BF016)');
SELECT throws_ok($$SET ROLE bf050_other; SELECT backfill_cancel('bf050_slow'); RESET ROLE$$,
                 'BF016', NULL, 'cancel by another role: PRIVILEGE (BF016)');
SELECT throws_ok($$SET ROLE bf050_other; SELECT backfill_retry('bf050_slow'); RESET ROLE$$,
                 'BF016', NULL, 'retry by another role: PRIVILEGE (BF016)');
SELECT throws_ok($$SET ROLE bf050_other; SELECT backfill_drop('bf050_slow'); RESET ROLE$$,
                 'BF016', NULL, 'drop by another role: PRIVILEGE (BF016)');
SELECT throws_ok($$SET ROLE bf050_other; SELECT backfill_drop('bf050_done'); RESET ROLE$$,
                 'BF016', NULL, 'drop of an idle backfill by another role: PRIVILEGE (BF016)');
SELECT is(current_user::text, 'postgres', 'back to postgres after the refused calls');
SELECT results_eq(
    $$SELECT l.status, r.paused FROM backfill.ledger l JOIN backfill.run r USING (run_id)
       WHERE l.run_id = $$ || :slow_run,
    $$VALUES ('running', false)$$,
    'the refused calls changed nothing: still running, not paused');

SELECT is(backfill_retry('bf050_slow'), false, 'retry of a running pass with nothing failed: false');
SELECT is((SELECT count(*) FROM backfill.ledger WHERE declaration = 'bf050_slow'), 1::bigint,
          'no new pass from that retry');

SELECT is(backfill_pause('bf050_slow'), true, 'pause: true');
SELECT is(backfill_pause('bf050_slow'), false, 'pause again: false');
SELECT results_eq($$SELECT status, paused FROM backfill_status('bf050_slow')$$,
                  $$VALUES ('running', true)$$, 'backfill_status: paused = true, still running');
SELECT ok(bf_test_poll($$SELECT partitions_running = 0 AND live_leases = 0
                        FROM backfill_status('bf050_slow')$$, 300),
          'paused: the lanes released their leases');

SELECT is(backfill_resume('bf050_slow'), true, 'resume: true');
SELECT is(backfill_resume('bf050_slow'), false, 'resume again: false');
SELECT is((SELECT paused FROM backfill_status('bf050_slow')), false,
          'backfill_status: paused = false after resume');
SELECT ok(bf_test_poll($$SELECT live_leases > 0 FROM backfill_status('bf050_slow')$$, 300),
          'resumed: a lane holds a lease again');

SELECT is(backfill_cancel('bf050_slow'), true, 'cancel: true');
SELECT is(backfill_cancel('bf050_slow'), false, 'cancel again: false');
SELECT results_eq(
    $$SELECT status, error_code, finished_at IS NOT NULL FROM backfill.ledger
       WHERE run_id = $$ || :slow_run,
    $$VALUES ('cancelled', 'BF010', true)$$,
    'ledger: cancelled with CANCELLED (BF010)');
SELECT is((SELECT status FROM backfill_status('bf050_slow')), 'cancelled',
          'backfill_status says cancelled');
SELECT ok(bf_test_poll($$SELECT count(*) = 0 FROM pg_stat_activity
                       WHERE backend_type = 'pg_backfill lane'$$, 300),
          'the lanes left after the cancel');
SELECT is((SELECT rows FROM backfill.ledger WHERE run_id = :slow_run),
          (SELECT count(*) FROM bf050_slow WHERE c = 1),
          'cancelled ledger rows = exactly the rows committed');
SELECT is((SELECT count(*) FROM bf050_slow WHERE c > 1), 0::bigint, 'no row done twice');
SELECT is_empty($$SELECT * FROM backfill_partitions('bf050_slow')
                   WHERE state IN ('pending', 'running')$$,
                'no partition of the cancelled pass is open');
SELECT is(backfill_pause('bf050_slow'), false, 'pause after the cancel: false');
SELECT is(backfill_resume('bf050_slow'), false, 'resume after the cancel: false');
SELECT is(backfill_retry('bf050_slow'), false, 'retry of a cancelled pass: false');

SELECT * FROM finish();

DROP ROLE bf050_other;
