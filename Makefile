# pg_backfill: PGXS build.  `make`, `make install`, `make installcheck`.
MODULE_big = pg_backfill
# src/ by layer (src/README.md): sql/ entry points, catalogs/ the extension's
# tables, trust/ as whom SQL runs, state/ the owner of a pass's state rows, engine/ a pass, workers/ the background
# processes, outbox/ messages and their relay; headers sit beside their file
OBJS = \
	src/pg_backfill.o \
	src/config.o \
	src/shmem.o \
	src/spicols.o \
	src/lanetable.o \
	src/pacers.o \
	src/askedprobes.o \
	src/jsonobj.o \
	src/searchpath.o \
	src/deadline.o \
	src/names.o \
	src/sql/declare.o \
	src/sql/declare_args.o \
	src/sql/declare_check.o \
	src/sql/declare_source.o \
	src/sql/key.o \
	src/sql/action.o \
	src/sql/ctid.o \
	src/sql/run.o \
	src/sql/control.o \
	src/sql/finalize.o \
	src/sql/shard.o \
	src/sql/shardmap.o \
	src/sql/probe.o \
	src/sql/ensure.o \
	src/sql/newest.o \
	src/sql/retire.o \
	src/sql/pauseall.o \
	src/sql/rehearse.o \
	src/catalogs/catalog.o \
	src/catalogs/declaration.o \
	src/catalogs/identity.o \
	src/trust/asrole.o \
	src/trust/requires.o \
	src/trust/scope.o \
	src/trust/tenancy.o \
	src/engine/enqueue.o \
	src/engine/citus.o \
	src/engine/shards.o \
	src/engine/moves.o \
	src/engine/pass.o \
	src/engine/plan.o \
	src/engine/planpages.o \
	src/engine/plankey.o \
	src/engine/planleaf.o \
	src/engine/planshard.o \
	src/engine/claim.o \
	src/engine/passend.o \
	src/engine/passcount.o \
	src/engine/attach.o \
	src/engine/estimate.o \
	src/engine/batch.o \
	src/engine/kind_range.o \
	src/engine/kind_leaf.o \
	src/engine/kind_shard.o \
	src/engine/kind_pages.o \
	src/engine/plan_blocks.o \
	src/engine/kind_blocks.o \
	src/engine/history.o \
	src/engine/rehearse.o \
	src/engine/pagecycle.o \
	src/engine/poison.o \
	src/engine/work.o \
	src/engine/drive.o \
	src/engine/keyset.o \
	src/engine/stats.o \
	src/engine/leaves.o \
	src/engine/pacing.o \
	src/engine/windows.o \
	src/engine/condition.o \
	src/engine/health.o \
	src/engine/idlecores.o \
	src/engine/backoff.o \
	src/engine/drift.o \
	src/workers/launcher.o \
	src/workers/scheduler.o \
	src/workers/needs.o \
	src/workers/children.o \
	src/workers/lane.o \
	src/workers/probe.o \
	src/workers/rehearsal.o \
	src/xact.o \
	src/advisory.o \
	src/worker.o \
	src/outbox/outbox.o \
	src/outbox/relay.o \
	src/outbox/events.o \
	src/state/states.o \
	src/state/pass_state.o \
	src/state/part_state.o \
	src/state/lease.o

EXTENSION = pg_backfill
DATA = pg_backfill--0.1.sql pg_backfill--0.1--0.2.sql pg_backfill--0.2--0.3.sql pg_backfill--0.3--0.4.sql pg_backfill--0.4--0.5.sql pg_backfill--0.5--0.6.sql
PGFILEDESC = "pg_backfill - paced, checkpointed data backfills"

# pg_regress runs in an existing database that backfill.database_names serves
# (a launcher stays connected to it, so pg_regress must not drop it).
REGRESS = declare run windows upgrade
REGRESS_OPTS = --use-existing

# isolation specs run in their own database, which no launcher serves, so
# the sessions race for leases exactly as lanes would, and nothing else does;
# states_*.spec call backfill_run and need a served database: scripts/test.sh
# runs them in backfill_iso (scripts/cluster.sh serves it)
ISOLATION = lease_claim states_run finalize_session
ISOLATION_OPTS = --inputdir=test --outputdir=test/output_iso

SRC_DIRS = src src/sql src/catalogs src/trust src/state src/engine src/workers src/outbox
PG_CPPFLAGS = $(addprefix -I,$(SRC_DIRS)) -I$(libpq_srcdir)
# libpq: a lane's connections to the Citus nodes that hold its shards (shards.c)
SHLIB_LINK = -lcurl
SHLIB_LINK_INTERNAL = $(libpq)
PG_CFLAGS = -Wall -Wmissing-prototypes -Werror

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# after the include: pgxs sets its own default, and expands this late
CONTRIB_TESTDB = backfill_regress

# PGXS tracks no header dependencies (unless the server was built with
# --enable-depend): every object depends on every project header, so a
# changed header rebuilds them all instead of leaving stale objects that
# load cleanly and then fail every pass.
PROJECT_HEADERS = $(wildcard $(addsuffix /*.h,$(SRC_DIRS)))
$(OBJS) $(OBJS:.o=.bc): $(PROJECT_HEADERS)

# ---- pg_backfill CLI (cli/; appended by the CLI owner) ----
# `make` also builds cli/pg_backfill, `make install` installs it into
# `pg_config --bindir`, `make clean` cleans it.
all: pg_backfill-cli
install: install-cli
clean: clean-cli
pg_backfill-cli:
	$(MAKE) -C cli PG_CONFIG='$(PG_CONFIG)'
install-cli: pg_backfill-cli
	$(MAKE) -C cli PG_CONFIG='$(PG_CONFIG)' install
clean-cli:
	$(MAKE) -C cli PG_CONFIG='$(PG_CONFIG)' clean
.PHONY: pg_backfill-cli install-cli clean-cli

# ---- release: the PGXN distribution ----
# `make dist` writes pg_backfill-X.Y.Z.zip, X.Y.Z being META.json's version,
# from the committed tree (git archive): the archive PGXN takes.
# test/t/099_release.pl checks that META.json, the control file, the newest
# upgrade script and debian/changelog agree on the version.
DISTDIR ?= .
DIST_VERSION = $(shell python3 -c 'import json; print(json.load(open("META.json"))["version"])')
dist:
	git archive --format=zip --prefix=pg_backfill-$(DIST_VERSION)/ -o $(DISTDIR)/pg_backfill-$(DIST_VERSION).zip HEAD
	@echo "make dist: $(DISTDIR)/pg_backfill-$(DIST_VERSION).zip"
.PHONY: dist
