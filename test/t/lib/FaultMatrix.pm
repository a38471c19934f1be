# FaultMatrix.pm -- the machinery of the fault matrix (issue 10), shared by
# test/t/083_fault_launcher.pl ... 089.
#
# A case is one backfill over a small table of its own, held in one phase
# of its pass, hit by one fault, and then checked:
#
#   my $fm = FaultMatrix->new($node);            # once per node
#   $fm->run_case(name => 'lane_batch_kill9', target => 'lane',
#                 phase => 'batch', fault => 'kill9',
#                 expect => ['completed'], todo => undef);
#
# Phases are held deterministically, by locks the test holds in background
# psql sessions, never by timing:
#   queued      the pass is enqueued and paused in one transaction (no lane)
#   planning    ACCESS EXCLUSIVE on the table: the first lane waits in its
#               preparation / plan, with the run still 'queued'
#   batch       an advisory lock the action waits for (fm_gate(k))
#   checkpoint  the partition rows FOR UPDATE: the batch's action is done,
#               its checkpoint statement waits
#   finishing   the ledger row FOR UPDATE: every partition is done, the
#               last lane waits to write the end
#   counting    ACCESS EXCLUSIVE on the table once the lane holds the
#               ledger row: the convergence count waits
# The lane is found as the pg_backfill lane whose pg_blocking_pids() holds
# the session that holds the lock, so the fault hits the process in that
# phase and no other.
#
# Faults: kill9 (SIGKILL: the postmaster restarts every backend),
# terminate (pg_terminate_backend), cancel (pg_cancel_backend), immediate
# (pg_ctl -m immediate, then start).
#
# Each case then asserts (check()):
#   - the ledger's final status and error code, and that backfill_status
#     says the same (status, phase done, last_error "CODE: ...");
#   - exactly once: the action is n = n + 1, so every row has n = 0 or 1,
#     the ledger's rows are the rows with n = 1, and a completed pass has
#     done them all;
#   - no loop: the lanes started for the pass, the failed batches and the
#     worker exits logged during the case stay under small bounds.
# A case whose expected state waits for a fix of issue 10 gives
# todo => 'finding N (who)': its assertions run inside a Test::More TODO
# block.  Every case records the state it ended in (matrix()), and the
# test prints the table at the end (print_matrix()).
package FaultMatrix;

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use BackfillTest;

our $ROWS = 600;
our $BATCH = 200;

# seconds a case may take to reach its phase, and its pass to end: deadlines
# for a loaded machine (every wait returns as soon as the state is there)
our $PHASE_TIMEOUT = 180;
our $END_TIMEOUT = 240;

sub new
{
	my ($class, $node) = @_;
	my $self = bless { node => $node, n => 0, matrix => [] }, $class;
	sq($node, q{
		CREATE EXTENSION IF NOT EXISTS pg_backfill;
		-- the action's gate: waits while the test holds advisory lock k
		CREATE OR REPLACE FUNCTION fm_gate(k int) RETURNS boolean
		LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			PERFORM pg_catalog.pg_advisory_xact_lock_shared(k);
			RETURN true;
		END $$;
	});
	return $self;
}

sub node { return $_[0]->{node}; }

# A fresh table and backfill for a case.  Options: rows, batch_size,
# max_parallel, role (declare as this role), declare (more
# backfill_declare arguments, SQL text).
sub new_case
{
	my ($self, $name, %o) = @_;
	my $node = $self->{node};
	my $rows = $o{rows} // $ROWS;
	my $key = 1000 + (++$self->{n});
	my $table = "fm_$name";
	my $extra = defined $o{declare} ? ", $o{declare}" : '';
	my $batch = $o{batch_size} // $BATCH;
	my $par = $o{max_parallel} // 1;
	my $set_role = defined $o{role} ? "SET ROLE $o{role};" : '';
	$o{action_extra} //= '';

	sq($node, qq{
		CREATE TABLE $table (id bigint PRIMARY KEY, n int NOT NULL DEFAULT 0);
		INSERT INTO $table (id) SELECT g FROM generate_series(1, $rows) g;
		ANALYZE $table;
		@{[ defined $o{role} ? "GRANT SELECT, UPDATE ON $table TO $o{role};" : '' ]}
		$set_role
		SELECT backfill_declare(name => '$name', relation => '$table', predicate => 'n = 0',
			action => 'UPDATE $table SET n = n + 1 WHERE id BETWEEN \$1 AND \$2 AND fm_gate($key)$o{action_extra}',
			batch_size => $batch, rate => 100, max_parallel => $par, max_attempts => 5,
			backoff_base => '200 ms', backoff_cap => '1 s',
			lock_timeout => '10 min', batch_timeout => '10 min'$extra, guard => false);
	});
	return { name => $name, table => $table, key => $key, rows => $rows,
		role => $o{role} };
}

# BackgroundPsql notes every query and its output: keep that out of the
# test's output (the failures still show)
sub quietly
{
	my ($code) = @_;
	my $tb = Test::More->builder;
	my $out = $tb->output;
	my $sink = '';
	$tb->output(\$sink);
	my @r = eval { $code->() };
	my $err = $@;
	$tb->output($out);
	die $err if $err;
	return wantarray ? @r : $r[0];
}

# a background psql session, and its backend pid
sub session
{
	my ($self) = @_;
	my $node = $self->{node};
	my $s = quietly(sub { $node->background_psql('postgres', on_error_stop => 0) });
	my $pid = quietly(sub { $s->query_safe('SELECT pg_backend_pid()') });
	chomp $pid;
	return { psql => $s, pid => $pid };
}

sub sess_do
{
	my ($s, $sql) = @_;
	return quietly(sub { $s->{psql}->query_safe($sql) });
}

# the pid of the pg_backfill lane that waits for session $s, once there is one
sub lane_blocked_by
{
	my ($self, $s, $what) = @_;
	my $node = $self->{node};
	my $sql = qq{SELECT pid FROM pg_catalog.pg_stat_activity
		WHERE backend_type = 'pg_backfill lane'
		  AND $s->{pid} = ANY (pg_catalog.pg_blocking_pids(pid))};
	my $deadline = time() + $PHASE_TIMEOUT;
	while (time() < $deadline)
	{
		my $pid = $node->safe_psql('postgres', $sql);
		return $pid if $pid =~ /^\d+$/;
		# a lane under a tiny timeout may give up waiting instead
		return 'timed out'
		  if defined $self->{timeout_since}
		  && $self->log_since($self->{timeout_since})
		  =~ /canceling statement due to (lock|statement) timeout/;
		usleep(100_000);
	}
	diag("no lane came to wait for $what (session $s->{pid}); activity:\n"
		  . $node->safe_psql('postgres',
			q{SELECT backend_type, wait_event_type, wait_event, state, query
			    FROM pg_stat_activity WHERE backend_type LIKE 'pg_backfill%'}));
	return undef;
}

sub run_phase
{
	my ($self, $run) = @_;
	return sq($self->{node}, "SELECT phase FROM backfill.run WHERE run_id = $run");
}

# Hold the pass of $c in $phase.  Returns the hold: run id, the lane's pid
# (undef in the queued phase), the sessions to release.
sub hold
{
	my ($self, $c, $phase) = @_;
	my $node = $self->{node};
	my $name = $c->{name};
	my %h = (phase => $phase, sessions => []);

	if ($phase eq 'queued')
	{
		($h{run}) = split /\n/, sq($node, qq{BEGIN; SELECT backfill_run('$name');
			SELECT backfill_pause('$name'); COMMIT;});
		$h{resume} = 1;
		return \%h;
	}
	if ($phase eq 'planning')
	{
		my $s = $self->session;
		push @{ $h{sessions} }, $s;
		sess_do($s, "BEGIN; LOCK TABLE $c->{table} IN ACCESS EXCLUSIVE MODE;");
		$h{run} = sq($node, "SELECT backfill_run('$name')");
		$h{lane} = $self->lane_blocked_by($s, 'the table (planning)');
		return \%h;
	}

	# every other phase starts with the first batch waiting on the gate
	my $gate = $self->session;
	push @{ $h{sessions} }, $gate;
	sess_do($gate, "SELECT pg_advisory_lock($c->{key})");
	$h{run} = sq($node, "SELECT backfill_run('$name')");
	$h{lane} = $self->lane_blocked_by($gate, 'the gate (batch)');
	return \%h if $phase eq 'batch' || !defined $h{lane};

	my $rows = $self->session;
	push @{ $h{sessions} }, $rows;
	if ($phase eq 'checkpoint')
	{
		sess_do($rows, "BEGIN; SELECT count(*) FROM (SELECT 1 FROM backfill.partition"
			  . " WHERE run_id = $h{run} FOR UPDATE) p;");
		sess_do($gate, "SELECT pg_advisory_unlock($c->{key})");
		$h{lane} = $self->lane_blocked_by($rows, 'the partition rows (checkpoint)');
		return \%h;
	}
	# finishing and counting: the ledger row first
	sess_do($rows, "BEGIN; SELECT count(*) FROM (SELECT 1 FROM backfill.ledger"
		  . " WHERE run_id = $h{run} FOR UPDATE) l;");
	sess_do($gate, "SELECT pg_advisory_unlock($c->{key})");
	$h{lane} = $self->lane_blocked_by($rows, 'the ledger row (finishing)');
	return \%h if $phase eq 'finishing' || !defined $h{lane};

	my $tab = $self->session;
	push @{ $h{sessions} }, $tab;
	sess_do($tab, "BEGIN; LOCK TABLE $c->{table} IN ACCESS EXCLUSIVE MODE;");
	sess_do($rows, 'COMMIT');
	$h{lane} = $self->lane_blocked_by($tab, 'the table (counting)');
	return \%h;
}

# let go of every lock the hold took (its sessions may have died in a crash)
sub release
{
	my ($self, $c, $h) = @_;
	# in the order taken: the gate first, then what waits behind the lane
	foreach my $s (@{ $h->{sessions} })
	{
		eval { quietly(sub { $s->{psql}->quit }); };
	}
	$h->{sessions} = [];
	if ($h->{resume})
	{
		wait_for_server($self->{node}, $PHASE_TIMEOUT);
		sq($self->{node}, "SELECT backfill_resume('$c->{name}')");
	}
}

# the pid of a worker of the node
sub worker_pid
{
	my ($self, $type) = @_;
	my $deadline = time() + $PHASE_TIMEOUT;
	while (time() < $deadline)
	{
		my $pid = sq($self->{node},
			"SELECT min(pid) FROM pg_stat_activity WHERE backend_type = 'pg_backfill $type'");
		return $pid if $pid =~ /^\d+$/;
		usleep(100_000);
	}
	return undef;
}

# hit $pid with $fault; returns true once the fault is delivered
sub inject
{
	my ($self, $fault, $pid) = @_;
	my $node = $self->{node};

	if ($fault eq 'kill9')
	{
		my $ok = kill('KILL', $pid);
		return $ok && wait_for_server($node, $PHASE_TIMEOUT);
	}
	if ($fault eq 'terminate')
	{
		return sq($node, "SELECT pg_terminate_backend($pid)") eq 't';
	}
	if ($fault eq 'cancel')
	{
		return sq($node, "SELECT pg_cancel_backend($pid)") eq 't';
	}
	if ($fault eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
		return wait_for_server($node, $PHASE_TIMEOUT);
	}
	die "unknown fault $fault";
}

# the log written since $pos
sub log_since
{
	my ($self, $pos) = @_;
	my $log = slurp_file($self->{node}->logfile);
	return substr($log, $pos);
}

sub log_pos
{
	my ($self) = @_;
	return -s $self->{node}->logfile;
}

# Wait for the pass to end and check the state it ended in against
# $expect = [status, error_code or undef].  Records the matrix row.
sub check
{
	my ($self, $c, $run, $label, $expect, $logpos, %o) = @_;
	my $node = $self->{node};
	my $name = $c->{name};
	my $t = exists $o{table} ? $o{table} : $c->{table};

	my $ended = pass_ended($node, $run, $o{end_timeout} // $END_TIMEOUT);
	# a pass still running: what its checkpoints say so far
	my ($status, $code, $lrows) = split /\|/,
	  ledger($node, $run, "status, coalesce(error_code, ''), coalesce(rows,"
		  . " (SELECT coalesce(sum(p.rows), 0) FROM backfill.partition p WHERE p.run_id = $run))");
	# a table that is gone: the rows its dropping let commit ($o{done})
	my ($done, $over, $total) = defined $t
	  ? split(/\|/, sq($node,
			"SELECT count(*) FILTER (WHERE n = 1), count(*) FILTER (WHERE n > 1), count(*) FROM $t"))
	  : ($o{done}, 0, $c->{rows});
	my $once = ($over == 0 && $done == $lrows
		  && ($status ne 'completed' || $done == $total)) ? 'yes' : 'no';
	push @{ $self->{matrix} },
	  [ $label, $status, $code || '-', "$done/$total", $once, $o{todo} // '' ];

	my ($want_status, $want_code) = @$expect;
	my $why = $o{todo};
	TODO:
	{
		local $TODO = $why;
		ok($ended, "$label: the pass ended");
		is($status, $want_status, "$label: ledger $want_status");
		is($code, $want_code // '', "$label: error code " . ($want_code // 'none'));
	}
	my ($sstatus, $sphase, $serr) = split /\|/, sq($node,
		"SELECT status, phase, coalesce(last_error, '') FROM backfill_status('$name')");
	is("$sstatus|$sphase", "$status|done", "$label: backfill_status says $status, phase done")
	  if $ended;
	like($serr, qr/^\Q$code\E: /, "$label: backfill_status names the error $code")
	  if $ended && $status ne 'completed';
	is($over, 0, "$label: no row was done twice (n > 1)");
	is($done, $lrows, "$label: the ledger counts exactly the rows done ($done)");
	if ($status eq 'completed')
	{
		is($done, $total, "$label: every row was done exactly once");
	}
	$self->no_loop($c, $run, $label, $logpos);
	return $status;
}

# No process looped on an error: few lanes were started for the pass, few
# batches failed, and the workers did not keep exiting.
sub no_loop
{
	my ($self, $c, $run, $label, $logpos) = @_;
	my $log = $self->log_since($logpos);
	my $name = $c->{name};
	my $starts = sq($self->{node}, "SELECT lane_starts FROM backfill.run WHERE run_id = $run");
	my @failed = ($log =~ /backfill "\Q$name\E" run \d+: batch failed/g);
	my @exits = ($log =~ /background worker "pg_backfill [a-z ]+" \(PID \d+\) exited with exit code 1/g);
	cmp_ok($starts, '<=', 4, "$label: at most 4 lanes started for the pass ($starts)");
	cmp_ok(scalar(@failed), '<=', 5, "$label: at most max_attempts failed batches logged");
	cmp_ok(scalar(@exits), '<=', 6, "$label: workers did not keep exiting (" . scalar(@exits) . ")");
}

# One case of the matrix: hold the phase, hit the target, release, check.
# %c: name, target (lane|scheduler|launcher), phase, fault, expect,
# todo, case (new_case options).
sub run_case
{
	my ($self, %c) = @_;
	my $label = $c{label} // "$c{target} / $c{phase} / $c{fault}";
	# FM_ONLY=regex runs only the cases whose label matches (while debugging)
	return if defined $ENV{FM_ONLY} && $label !~ /$ENV{FM_ONLY}/;
	my $case = $self->new_case($c{name}, %{ $c{case} // {} });
	my $logpos = $self->log_pos;
	my $h = $self->hold($case, $c{phase});

	my $ok = $c{phase} eq 'queued' || defined $h->{lane};
	ok($ok, "$label: the pass is held in phase $c{phase}");
	# a lane that gave up waiting (a tiny timeout) left the phase already
	$ok = 0 if defined $h->{lane} && $h->{lane} eq 'timed out';
	if ($ok && $c{phase} eq 'planning')
	{
		is($self->run_phase($h->{run}), 'queued', "$label: the run is not planned yet");
	}
	if ($ok && $c{phase} eq 'counting')
	{
		is($self->run_phase($h->{run}), 'counting', "$label: the run is counting");
	}
	my $pid = $c{target} eq 'lane' ? $h->{lane} : $self->worker_pid($c{target});
	if ($ok && defined $pid && $c{fault} ne 'none' && $pid =~ /^\d+$/)
	{
		ok($self->inject($c{fault}, $pid), "$label: fault delivered to pid $pid");
	}
	$self->release($case, $h);
	my $status = $self->check($case, $h->{run}, $label, $c{expect}, $logpos, todo => $c{todo});
	$self->supervisors_back($label, $c{todo_supervisors}) if $c{target} ne 'lane';
	return $status;
}

# After a fault of the launcher or a scheduler: one launcher runs again,
# has been up long enough to start its schedulers, and one scheduler
# serves the database.
sub supervisors_back
{
	my ($self, $label, $todo) = @_;
	my $node = $self->{node};
	ok(poll_until($node,
		q{SELECT count(*) = 1 AND min(now() - backend_start) > interval '3 s'
		    FROM pg_catalog.pg_stat_activity WHERE backend_type = 'pg_backfill launcher'},
		't', $END_TIMEOUT), "$label: the launcher runs again");
	local $TODO = $todo;
	# (a second scheduler that stays makes the count 2 for good: the wait
	# fails however long it is)
	ok(poll_until($node,
		q{SELECT count(*) FROM pg_catalog.pg_stat_activity
		   WHERE backend_type = 'pg_backfill scheduler' AND datname = 'postgres'}, '1',
		$END_TIMEOUT),
		"$label: one scheduler serves the database");
}

# ---------------------------------------------------------------------
# The relay.  A function sink that records each delivery, gated like the
# action: fm_sink waits while the test holds advisory lock (1, topic), and
# the marking of a message delivered waits while it holds (2, topic).
# Phases:
#   selecting   a transaction that was in flight when the message was
#               emitted stays open: the relay keeps looking and may not
#               deliver it yet
#   delivering  the sink waits on (1, topic)
#   marking     the sink has run; the UPDATE marking the message delivered
#               waits on (2, topic) (a trigger the test adds)
# ---------------------------------------------------------------------
sub relay_setup
{
	my ($self) = @_;
	return if $self->{relay_ready}++;
	sq($self->{node}, q{
		CREATE TABLE fm_delivered (n bigserial PRIMARY KEY, topic text, key text, payload jsonb);
		CREATE FUNCTION fm_sink(topic text, key text, payload jsonb) RETURNS void
		LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM pg_catalog.pg_advisory_xact_lock_shared(1, pg_catalog.hashtext(topic));
			INSERT INTO public.fm_delivered (topic, key, payload) VALUES (topic, key, payload);
		END $$;
		CREATE FUNCTION fm_mark_gate() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.state = 'delivered' AND NEW.topic LIKE 'fm\_%' THEN
				PERFORM pg_catalog.pg_advisory_xact_lock_shared(2, pg_catalog.hashtext(NEW.topic));
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER fm_mark_gate BEFORE UPDATE ON backfill.outbox
			FOR EACH ROW EXECUTE FUNCTION fm_mark_gate();
	});
}

# the relay's pid once it waits for session $s, or (selecting) once it runs
sub relay_pid
{
	my ($self, $s) = @_;
	my $cond = defined $s ? "AND $s->{pid} = ANY (pg_catalog.pg_blocking_pids(pid))" : '';
	my $deadline = time() + $PHASE_TIMEOUT;
	while (time() < $deadline)
	{
		my $pid = sq($self->{node}, "SELECT min(pid) FROM pg_catalog.pg_stat_activity"
			  . " WHERE backend_type = 'pg_backfill relay' $cond");
		return $pid if $pid =~ /^\d+$/;
		usleep(100_000);
	}
	diag('the relay never came to the phase');
	return undef;
}

# One relay case: a message of its own topic, held in $phase, hit by $fault.
# It must end delivered, exactly once (the function sink's insert and the
# marking commit together), after few attempts.
sub relay_case
{
	my ($self, %c) = @_;
	my $node = $self->{node};
	my $topic = "fm_$c{name}";
	my $label = "relay / $c{phase} / $c{fault}";
	my $logpos = $self->log_pos;
	my @sessions;

	$self->relay_setup;
	sq($node, "SELECT backfill_outbox_sink('$topic', 'function', 'fm_sink',"
		  . " backoff_base => '200 ms', backoff_cap => '1 s')");
	my $hold = $self->session;
	push @sessions, $hold;
	if ($c{phase} eq 'selecting')
	{
		sess_do($hold, 'BEGIN; SELECT pg_current_xact_id();');
	}
	else
	{
		my $k = $c{phase} eq 'delivering' ? 1 : 2;
		sess_do($hold, "SELECT pg_advisory_lock($k, hashtext('$topic'))");
	}
	my $id = sq($node, "SELECT backfill_outbox_emit('$topic', 'k', '{\"case\": \"$c{name}\"}')");
	my $pid = $self->relay_pid($c{phase} eq 'selecting' ? undef : $hold);
	ok(defined $pid, "$label: the relay is held in phase $c{phase}");
	if ($c{phase} eq 'selecting')
	{
		is(holds_for($node, "SELECT state FROM backfill.outbox WHERE id = $id", 'pending', 1),
			undef, "$label: the message waits while a transaction of its time is open");
	}
	ok($self->inject($c{fault}, $pid), "$label: fault delivered to pid $pid") if defined $pid;
	eval { quietly(sub { $_->{psql}->quit }) } foreach @sessions;

	my $sql = "SELECT o.state, (SELECT count(*) FROM fm_delivered d WHERE d.topic = o.topic)"
	  . " FROM backfill.outbox o WHERE o.id = $id";
	my $ok = poll_until($node, "SELECT state FROM backfill.outbox WHERE id = $id", 'delivered',
		$END_TIMEOUT);
	my ($state, $deliveries) = split /\|/, sq($node, $sql);
	my $attempts = sq($node, "SELECT attempts FROM backfill.outbox WHERE id = $id");
	push @{ $self->{matrix} },
	  [ $label, "outbox $state", '-', "$deliveries delivery", $deliveries == 1 ? 'yes' : 'no',
		$c{todo} // '' ];
	TODO:
	{
		local $TODO = $c{todo};
		ok($ok, "$label: the message ends delivered");
		is($deliveries, 1, "$label: the sink recorded it exactly once");
		cmp_ok($attempts, '<=', 2, "$label: after at most 2 attempts ($attempts)");
	}
	my $log = $self->log_since($logpos);
	my @exits = ($log =~ /background worker "pg_backfill relay" \(PID \d+\) exited with exit code 1/g);
	cmp_ok(scalar(@exits), '<=', 2, "$label: the relay did not keep exiting (" . scalar(@exits) . ")");
}

# A change made while a batch is in flight: the pass is held in phase
# batch, $c{change} runs in a session of its own (DDL waits for the
# batch's locks), the gate opens, and with restart => 1 the lane is
# terminated first, so that a new lane must log in after the change.
# %c: name, change (SQL), restart, expect, todo, case, table (where the
# rows are afterwards; undef when gone), done (rows done then), label.
sub change_case
{
	my ($self, %c) = @_;
	my $node = $self->{node};
	my $label = $c{label} // "change / $c{name}";
	my $case = $self->new_case($c{name}, %{ $c{case} // {} });
	my $logpos = $self->log_pos;
	my $h = $self->hold($case, 'batch');
	ok(defined $h->{lane}, "$label: a batch is in flight");

	my $ddl = $self->session;
	push @{ $h->{sessions} }, $ddl;
	my $change = $c{change};
	$change =~ s/\{t\}/$case->{table}/g;
	$change =~ s/\{name\}/$case->{name}/g;
	# it may wait for the batch's locks: send it, and see it wait or end
	$ddl->{psql}->{stdin} .= "$change;\n";
	$ddl->{psql}->{run}->pump_nb;
	my $last = (split /;/, $change)[-1] =~ s/^\s+//r =~ s/'/''/gr;
	my $done = "SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE pid = $ddl->{pid}"
	  . " AND state = 'idle' AND query LIKE '%$last%'";
	if ($c{restart})
	{
		ok(poll_until($node, $done, '1', $PHASE_TIMEOUT), "$label: the change is made");
		ok($self->inject('terminate', $h->{lane}), "$label: the lane is terminated after the change");
	}
	else
	{
		ok(poll_until($node, "SELECT count(*) FROM pg_catalog.pg_stat_activity"
			  . " WHERE pid = $ddl->{pid} AND (wait_event_type = 'Lock'"
			  . "   OR (state = 'idle' AND query LIKE '%$last%'))", '1', $PHASE_TIMEOUT),
			"$label: the change waits for the batch, or is done");
	}
	$self->release($case, $h);
	my %o = (todo => $c{todo}, end_timeout => $c{end_timeout});
	$o{table} = $c{table} if exists $c{table};
	$o{done} = $c{done};
	return $self->check($case, $h->{run}, $label, $c{expect}, $logpos, %o);
}

sub matrix { return $_[0]->{matrix}; }

# the cases and the state each ended in, as a table in the test's output
sub print_matrix
{
	my ($self) = @_;
	my @rows = ([ 'case', 'ledger', 'error', 'rows n=1', 'once', 'todo' ], @{ $self->{matrix} });
	my @w;
	foreach my $r (@rows)
	{
		for my $i (0 .. $#$r)
		{
			$w[$i] = length($r->[$i]) if !defined $w[$i] || length($r->[$i]) > $w[$i];
		}
	}
	foreach my $r (@rows)
	{
		note(join(' | ', map { sprintf("%-*s", $w[$_], $r->[$_]) } 0 .. $#$r));
	}
}

1;
