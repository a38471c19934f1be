--
-- run: a pass, its ledger row, skip, force, environments and the pending report
--
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS pg_backfill CASCADE;
CREATE EXTENSION pg_backfill;
\set VERBOSITY default
RESET backfill.environment;

DROP TABLE IF EXISTS accounts CASCADE;
SET client_min_messages = notice;
CREATE TABLE accounts (id int PRIMARY KEY, email text NOT NULL, email_lower text);
INSERT INTO accounts SELECT g, 'User' || g || '@Example.COM', NULL FROM generate_series(1, 1000) g;

SELECT backfill_declare('accounts_email_lower', 'accounts', 'email_lower IS NULL',
    'UPDATE accounts SET email_lower = lower(email)
      WHERE id BETWEEN $1 AND $2 AND email_lower IS NULL',
    batch_size => 200, rate => 1000);

-- never run yet
SELECT name, state, changed, last_run_id FROM backfill_pending();
SELECT name, status, rows FROM backfill_status('accounts_email_lower');

-- a pass starts when the transaction that enqueued it commits
SELECT backfill_run('accounts_email_lower');
SELECT backfill_wait(1, '60 s');
SELECT run_id, ledger_name, status, forced, previous_run_id, rows, batches,
       finished_at IS NOT NULL AS finished, error_code
  FROM backfill_ledger ORDER BY run_id;
SELECT count(*) FILTER (WHERE email_lower = lower(email)) AS rewritten,
       count(*) FILTER (WHERE email_lower IS NULL) AS left_to_do
  FROM accounts;
SELECT name, status, rows, batches, progress, rows_per_sec > 0 AS has_rate
  FROM backfill_status('accounts_email_lower');

-- running it again is skipped, with the completed run id
SELECT backfill_run('accounts_email_lower');
SELECT count(*) AS ledger_rows FROM backfill.ledger;

-- force records a new pass that points at the previous one
SELECT backfill_run('accounts_email_lower', force => true);
SELECT backfill_wait(2, '60 s');
SELECT run_id, ledger_name, status, forced, previous_run_id, rows, batches, error_code
  FROM backfill_ledger ORDER BY run_id;

-- the ledger is history (terse: the detail of this one carries the end time)
\set VERBOSITY terse
UPDATE backfill.ledger SET rows = 0 WHERE run_id = 1;
\set VERBOSITY default
DELETE FROM backfill.ledger WHERE run_id = 1;

-- errors of run and wait
SELECT backfill_run('no_such_backfill');
SELECT backfill_wait(42, '1 s');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT backfill_wait(1, '1 s');
ROLLBACK;

-- environments
SELECT backfill_declare('accounts_staging_only', 'accounts', 'email_lower IS NULL',
    'UPDATE accounts SET email_lower = lower(email) WHERE id BETWEEN $1 AND $2 AND (email_lower IS NULL)',
    environments => '{staging}');
SELECT backfill_run('accounts_staging_only');
SELECT count(*) AS staging_ledger_rows FROM backfill.ledger
 WHERE declaration = 'accounts_staging_only';
SET backfill.environment = 'staging';
SELECT backfill_run('accounts_staging_only');
SELECT backfill_wait(3, '60 s');
RESET backfill.environment;

-- a change while idle, and a stalled pass
SELECT backfill_declare('accounts_email_lower', 'accounts', 'email_lower IS NULL',
    'UPDATE accounts SET email_lower = lower(trim(email))
      WHERE id BETWEEN $1 AND $2 AND email_lower IS NULL',
    batch_size => 200, rate => 1000);
UPDATE accounts SET email_lower = NULL WHERE id <= 10;
SELECT backfill_declare('accounts_half', 'accounts', 'email_lower IS NULL',
    'UPDATE accounts SET email_lower = lower(email)
      WHERE id BETWEEN $1 AND $2 AND id % 2 = 0 AND (email_lower IS NULL)',
    batch_size => 200, rate => 1000);
SELECT backfill_run('accounts_half');
SELECT backfill_wait(4, '60 s');
SELECT run_id, ledger_name, status, rows, error_code, error_message
  FROM backfill_ledger WHERE run_id = 4;
SELECT name, state, changed, checksum = completed_checksum AS same_checksum,
       environments, last_run_id, last_completed_run_id
  FROM backfill_pending();

DROP TABLE accounts;
