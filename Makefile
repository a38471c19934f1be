# pg_backfill: PGXS build.  `make`, `make install`, `make installcheck`.
MODULE_big = pg_backfill
OBJS = \
	src/pg_backfill.o \
	src/shmem.o \
	src/catalog.o \
	src/declare.o \
	src/run.o \
	src/launcher.o \
	src/lane.o \
	src/pass.o \
	src/batch.o

EXTENSION = pg_backfill
DATA = pg_backfill--0.1.sql
PGFILEDESC = "pg_backfill - paced, checkpointed data backfills"

REGRESS = declare run
REGRESS_OPTS = --inputdir=test --outputdir=test/results --load-extension=pg_backfill

PG_CPPFLAGS = -Isrc
PG_CFLAGS = -Wall -Wmissing-prototypes -Werror

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)
